//! Inputs for `hostile_inputs.rs`: valid stored data of every kind, with
//! hostile paths and counts mixed in, for `mutated` to damage further.

use proptest::prelude::*;
use zephon_storage::format::webdataset::tar;

/// Paths a manifest might hold: plain names, and every way found to leave
/// or alias the root (`..`, absolute, URIs, empty or `.` names, padded
/// names, backslashes, control characters, anything).
pub fn hostile_path() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => "[a-z0-9_]{1,6}",
        1 => Just("..".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just(String::new()),
        1 => Just(" ..".to_owned()),
        1 => Just("..\\..".to_owned()),
        1 => Just("%2e%2e".to_owned()),
        1 => Just("s3:".to_owned()),
        1 => Just("C:".to_owned()),
        1 => "[\\x00-\\x1f]{1,2}",
        1 => any::<String>(),
    ];
    prop_oneof![
        3 => "[a-z0-9_]{1,8}\\.(jsonl|bin|mds|tar)",
        4 => (prop::collection::vec(part, 1..5), prop_oneof!["", "/", "s3://", "http://h/", "file://"])
            .prop_map(|(parts, lead)| format!("{lead}{}", parts.join("/"))),
        1 => any::<String>(),
    ]
}

/// Sample counts and sizes, small or near the edges of `u64`.
pub fn count() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0..64u64, 1 => any::<u64>(), 1 => Just(u64::MAX), 1 => Just(u64::MAX / 2 + 1)]
}

/// Entries of a manifest, with some paths repeated from earlier entries.
pub fn entries() -> impl Strategy<Value = Vec<(String, u64, u64, Option<String>)>> {
    let entry = (
        hostile_path(),
        count(),
        count(),
        prop::option::weighted(0.2, hostile_path()),
    );
    (
        prop::collection::vec(entry, 0..6),
        prop::collection::vec(prop::bool::weighted(0.2), 6),
    )
        .prop_map(|(mut v, repeat)| {
            for i in 1..v.len() {
                if repeat[i] {
                    v[i].0 = v[i - 1].0.clone();
                }
            }
            v
        })
}

/// Zephon manifests of the formats whose manifests are followed.
pub fn zephon_manifest() -> impl Strategy<Value = Vec<u8>> {
    let format = prop_oneof![
        Just(serde_json::Value::Null),
        Just(serde_json::json!({"kind": "jsonl"})),
        Just(serde_json::json!({"kind": "megatron"})),
        Just(serde_json::json!({"kind": "webdataset"})),
        (0..4u64).prop_map(|s| serde_json::json!({"kind": "tokens", "dtype": "u8", "seq_len": s})),
    ];
    (entries(), format).prop_map(|(entries, format)| {
        let shards: Vec<_> = entries
            .iter()
            .map(|(p, samples, bytes, index)| {
                let mut e = serde_json::json!({"path": p, "samples": samples, "bytes": bytes});
                if let Some(i) = index {
                    e["index"] = i.clone().into();
                }
                e
            })
            .collect();
        let mut m = serde_json::json!({"version": 1, "shards": shards});
        if !format.is_null() {
            m["format"] = format;
        }
        m.to_string().into_bytes()
    })
}

/// Streaming indexes, some with mismatched columns, unsupported
/// compression or a foreign shard format.
pub fn streaming_index() -> impl Strategy<Value = Vec<u8>> {
    let compression = prop_oneof![
        Just(None),
        Just(Some("zstd")),
        Just(Some("gz")),
        Just(Some("br"))
    ];
    let shard = (
        hostile_path(),
        count(),
        count(),
        prop::option::weighted(0.3, hostile_path()),
        compression,
        prop_oneof![9 => Just("mds"), 1 => Just("json")],
        1..3usize,
    );
    (prop::collection::vec(shard, 0..5), prop::collection::vec(any::<bool>(), 5)).prop_map(
        |(mut shards, repeat)| {
            for i in 1..shards.len() {
                if repeat[i] {
                    shards[i].0 = shards[i - 1].0.clone();
                }
            }
            let shards: Vec<_> = shards
                .iter()
                .map(|(base, samples, bytes, zip, compression, format, cols)| {
                    serde_json::json!({
                        "column_encodings": vec!["str"; *cols],
                        "column_names": (0..*cols).map(|c| format!("c{c}")).collect::<Vec<_>>(),
                        "column_sizes": vec![serde_json::Value::Null; 1],
                        "compression": compression,
                        "format": format,
                        "raw_data": {"basename": base, "bytes": bytes},
                        "zip_data": zip.as_ref().map(|z| serde_json::json!({"basename": z, "bytes": bytes})),
                        "samples": samples,
                    })
                })
                .collect();
            serde_json::json!({"version": 2, "shards": shards}).to_string().into_bytes()
        },
    )
}

/// A JSONL shard: lines that are JSON objects or arbitrary text.
pub fn jsonl() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        3 => ("[a-z]{1,4}", any::<i32>(), "[ -~]{0,8}")
            .prop_map(|(k, n, s)| serde_json::json!({k: n, "s": s}).to_string()),
        1 => "[ -~\\t]{0,12}",
        1 => any::<String>(),
    ];
    (
        prop::collection::vec(line, 0..6),
        prop_oneof![Just("\n"), Just("\r\n")],
        any::<bool>(),
    )
        .prop_map(|(lines, nl, trailing)| {
            let mut s = lines.join(nl);
            if trailing {
                s.push_str(nl);
            }
            s.into_bytes()
        })
}

/// A tar of members `(name, size)`; returns it and where each member's
/// data starts.
pub fn tar_of(members: &[(String, usize)]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut b = tar::Builder::new(Vec::new());
    for (name, size) in members {
        let mut h = tar::Header::new_ustar();
        h.set_size(*size as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, &vec![b'7'; *size][..]).unwrap();
    }
    let data = b.into_inner().unwrap();
    let mut at = 0;
    let spans = members
        .iter()
        .map(|(_, size)| {
            let start = at + 512;
            at = start + size.div_ceil(512) * 512;
            (start, start + size)
        })
        .collect();
    (data, spans)
}
