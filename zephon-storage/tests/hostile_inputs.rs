//! Every parser of stored input, fed arbitrary and mutated bytes: JSONL
//! lines, `index.json` manifests, Streaming's MDS index and shards, tar
//! headers (WebDataset). Each case must end in a valid result or a clean
//! error: never a panic, never an accepted input that is silently wrong
//! (a path outside the dataset root, a shard twice, a count that wraps, a
//! record that is not what the line says, raw control bytes in a message).
//!
//! Each test prints its row of the outcome table (`--nocapture` shows it).

use crate::hostile;

use hostile::inputs::{jsonl, streaming_index, tar_of, zephon_manifest};
use hostile::{Outcome, Tally, inside, mutated};
use proptest::prelude::*;
use std::collections::HashSet;
use zephon_core::SamplePtr;
use zephon_core::record::PointerChunks;
use zephon_storage::format::jsonl::{LineIndex, parse_run};
use zephon_storage::format::mds::{MdsColumn, MdsIndex, encode_shard};
use zephon_storage::format::webdataset::{TarIndex, tar};
use zephon_storage::format::{FormatSpec, ShardIndex};
use zephon_storage::manifest::{Manifest, ManifestError, decode_index};

/// What an accepted manifest must satisfy, checked independently of
/// `Manifest::check`: every path resolves inside the root, no two entries
/// resolve to one object, the counts add up.
fn judge_manifest(parsed: Result<Manifest, ManifestError>) -> Outcome {
    let m = match parsed {
        Ok(m) => m,
        Err(e) => return Outcome::error(&e.to_string()),
    };
    let mut seen = HashSet::new();
    let mut total: u64 = 0;
    for e in &m.shards {
        let Some(path) = inside(&e.path) else {
            return Outcome::Silent(format!("accepted {:?}, outside the root", e.path));
        };
        if e.index.as_deref().is_some_and(|i| inside(i).is_none()) {
            return Outcome::Silent(format!("accepted sidecar {:?}", e.index));
        }
        if !seen.insert(path) {
            return Outcome::Silent(format!("accepted {:?} twice", e.path));
        }
        let Some(t) = total.checked_add(e.samples) else {
            return Outcome::Silent("accepted counts that wrap".into());
        };
        total = t;
    }
    Outcome::Valid
}

#[test]
fn index_json_manifests() {
    let mut tally = Tally::new("index.json manifests (Zephon)");
    tally.run(600, mutated(zephon_manifest()), |bytes| {
        judge_manifest(Manifest::parse(bytes))
    });
    // The same through serde, which code may call directly.
    tally.run(200, mutated(zephon_manifest()), |bytes| {
        judge_manifest(
            serde_json::from_slice::<Manifest>(bytes)
                .map_err(|e| ManifestError::Invalid(e.to_string())),
        )
    });
    tally.finish();
}

#[test]
fn mds_index() {
    let mut tally = Tally::new("MDS index (Streaming index.json)");
    tally.run(800, mutated(streaming_index()), |bytes| {
        let parsed = Manifest::parse(bytes);
        if let Ok(m) = &parsed
            && !matches!(m.format, FormatSpec::Mds { .. } | FormatSpec::Jsonl)
        {
            return Outcome::Silent(format!("a Streaming index read as {}", m.format.name()));
        }
        judge_manifest(parsed)
    });
    tally.finish();
}

#[test]
fn mds_shards() {
    let cols = vec![
        MdsColumn::new("id", "int", Some(8)),
        MdsColumn::new("text", "str", None),
        MdsColumn::new("j", "json", None),
    ];
    let sample = ("[a-z]{0,6}", "[0-9]{0,3}")
        .prop_map(|(t, j)| vec![7i64.to_le_bytes().to_vec(), t.into_bytes(), j.into_bytes()]);
    let shard = prop::collection::vec(sample, 0..5).prop_map({
        let cols = cols.clone();
        move |s| encode_shard(&cols, &s)
    });
    let mut tally = Tally::new("MDS shard bytes");
    tally.run(1500, mutated(shard), |bytes| {
        match MdsIndex::open(bytes, &cols) {
            Err(e) => Outcome::error(&e),
            Ok(index) => {
                let data = bytes::Bytes::copy_from_slice(bytes);
                for i in 0..index.len() {
                    if let Err(e) = index.decode(&data, &[i]) {
                        return Outcome::error(&e);
                    }
                }
                // The path fetch takes: every sample at once, into chunks.
                let ptrs: Vec<SamplePtr> = (0..index.len())
                    .map(|sample| SamplePtr {
                        dataset: 0,
                        shard: 0,
                        sample,
                        lane: 0,
                    })
                    .collect();
                let mut out = PointerChunks::new(&ptrs, 2, 3);
                if let Err(e) = index
                    .decode_chunks(&data, &mut out)
                    .and_then(|()| out.finish())
                {
                    return Outcome::error(&e);
                }
                Outcome::Valid
            }
        }
    });
    tally.finish();
}

/// What each line should parse to: the JSON object, or `None`.
fn expected_lines(data: &[u8]) -> Vec<Option<serde_json::Map<String, serde_json::Value>>> {
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.is_empty() || data.ends_with(b"\n") {
        lines.pop();
    }
    lines
        .into_iter()
        .map(|l| serde_json::from_slice(l.strip_suffix(b"\r").unwrap_or(l)).ok())
        .collect()
}

#[test]
fn jsonl_lines() {
    let mut tally = Tally::new("JSONL lines");
    tally.run(1500, mutated(jsonl()), |bytes| {
        let want = expected_lines(bytes);
        let index = match LineIndex::build(bytes) {
            Ok(index) => index,
            Err(e) => {
                // Refused at indexing: the line it names must be empty.
                let line = bytes.split(|&b| b == b'\n').nth(e.line as usize - 1);
                return match line {
                    Some([]) => Outcome::error(&e.to_string()),
                    _ => Outcome::Silent(format!("{e}, but it is {line:?}")),
                };
            }
        };
        if index.len() != want.len() as u64 {
            return Outcome::Silent(format!(
                "{} lines indexed, {} present",
                index.len(),
                want.len()
            ));
        }
        match parse_run(bytes, 0, "d", "s.jsonl") {
            Err(e) => {
                let e = e.to_string();
                let first_bad = want.iter().position(Option::is_none);
                match first_bad {
                    Some(i) if e.contains(&format!("line {}", i + 1)) && e.contains("s.jsonl") => {
                        Outcome::error(&e)
                    }
                    _ => Outcome::Silent(format!("wrong error for {first_bad:?}: {e}")),
                }
            }
            Ok(records) => {
                if records.len() != want.len() {
                    return Outcome::Silent(format!(
                        "{} records for {} lines",
                        records.len(),
                        want.len()
                    ));
                }
                for (r, w) in records.iter().zip(&want) {
                    let Some(w) = w else {
                        return Outcome::Silent(
                            "a line that is not a JSON object was accepted".into(),
                        );
                    };
                    if r.fields.len() != w.len() || w.keys().any(|k| r.get(k).is_none()) {
                        return Outcome::Silent(format!("fields {:?} for {w:?}", r.fields));
                    }
                }
                Outcome::Valid
            }
        }
    });
    // The line-offset sidecar of a JSONL shard (byte-range reads).
    tally.run(
        500,
        mutated(prop::collection::vec(0..4096u64, 0..8).prop_map(|mut v| {
            v.sort_unstable();
            v.dedup();
            v.iter().flat_map(|s| s.to_le_bytes()).collect::<Vec<u8>>()
        })),
        |bytes| match decode_index(bytes) {
            None => Outcome::error("not a line-offset index"),
            Some(i) => {
                let starts: Vec<u64> = i.starts().collect();
                if starts[0] == 0 && starts.windows(2).all(|w| w[0] < w[1]) {
                    Outcome::Valid
                } else {
                    Outcome::Silent(format!("accepted offsets {starts:?}"))
                }
            }
        },
    );
    tally.finish();
}

#[test]
fn tar_headers() {
    let members = prop::collection::vec(
        ("[a-z]{1,4}(/[a-z]{1,3})?\\.(txt|json|cls|bin)", 0..700usize),
        1..4,
    );
    // Header fields overwritten with arbitrary bytes, checksum made valid
    // again so the tar reader looks past it.
    let header_edit = (
        members.clone(),
        0..4usize,
        prop_oneof![Just(0..100), Just(124..136), Just(156..157), Just(345..500)],
        prop::collection::vec(any::<u8>(), 1..16),
    );
    let mut tally = Tally::new("tar headers (WebDataset)");
    tally.run(800, header_edit, |(members, which, field, bytes)| {
        let (mut data, spans) = tar_of(members);
        let header = spans[which % spans.len()].0 - 512;
        for (k, b) in bytes.iter().enumerate().take(field.len()) {
            data[header + field.start + k] = *b;
        }
        let mut h = tar::Header::new_old();
        h.as_mut_bytes()
            .copy_from_slice(&data[header..header + 512]);
        h.set_cksum();
        data[header..header + 512].copy_from_slice(h.as_bytes());
        judge_tar(&data, None)
    });
    // Truncated anywhere: a tar cut before its end-of-archive block has
    // lost members or data, so reading it must be an error.
    tally.run(
        800,
        (members, any::<prop::sample::Index>(), any::<bool>()),
        |(members, cut, on_a_block)| {
            let (data, spans) = tar_of(members);
            // Cuts between blocks too: the tar reader sees a clean end there.
            let cut = match cut.index(data.len() + 1) {
                c if *on_a_block => c / 512 * 512,
                c => c,
            };
            let last_end = spans.last().map_or(0, |&(_, e)| e.div_ceil(512) * 512);
            judge_tar(&data[..cut], Some(cut < last_end + 512))
        },
    );
    // Arbitrary byte mutations of whole tars.
    let whole = prop::collection::vec(("[a-z]{1,4}\\.(txt|json)", 0..600usize), 1..3)
        .prop_map(|m| tar_of(&m).0);
    tally.run(800, mutated(whole), |data| judge_tar(data, None));
    tally.finish();
}

/// Indexes and decodes a tar; `truncated` says the bytes end before the
/// archive does, which must be an error.
fn judge_tar(data: &[u8], truncated: Option<bool>) -> Outcome {
    match TarIndex::open(data) {
        Err(e) => Outcome::error(&e),
        Ok(_) if truncated == Some(true) => {
            Outcome::Silent(format!("a tar cut at byte {} was accepted", data.len()))
        }
        Ok(index) => {
            let bytes = bytes::Bytes::copy_from_slice(data);
            for i in 0..index.len() {
                if let Err(e) = index.decode(&bytes, &[i]) {
                    return Outcome::error(&e);
                }
            }
            Outcome::Valid
        }
    }
}
