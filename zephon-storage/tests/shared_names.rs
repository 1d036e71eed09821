//! Records read from one local shard share its field names, and token
//! samples are views of the file, whichever read path produced them.

use zephon_core::record::FieldName;
use zephon_core::{Dataset, Record, Value};
use zephon_storage::DatasetExt;
use zephon_storage::format::FormatOptions;
use zephon_storage::format::tokens::TokenDtype;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn read(ds: &Dataset, indices: &[u64]) -> Vec<Record> {
    block_on(ds.shards()[0].read_indices(indices)).unwrap()
}

fn name<'a>(r: &'a Record, field: &str) -> &'a FieldName {
    r.fields.get_key_value(field).expect("the field").0
}

#[test]
fn jsonl_records_of_one_shard_share_their_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.jsonl"),
        "{\"id\":0,\"text\":\"a\"}\n{\"id\":1,\"text\":\"b\"}\n{\"text\":\"c\",\"id\":2}\n",
    )
    .unwrap();
    let ds = Dataset::from_path("d", dir.path()).unwrap();
    // Both read paths: a run of adjacent lines, and lines apart.
    let run = block_on(ds.shards()[0].read_run(0, 2)).unwrap();
    let apart = read(&ds, &[2, 0]);
    for field in ["id", "text"] {
        assert!(FieldName::ptr_eq(
            name(&run[0], field),
            name(&run[1], field)
        ));
        assert!(FieldName::ptr_eq(
            name(&run[0], field),
            name(&apart[0], field)
        ));
        assert!(FieldName::ptr_eq(
            name(&apart[0], field),
            name(&apart[1], field)
        ));
    }
    assert_eq!(apart[0].text("text"), Some("c"));
}

#[test]
fn flat_token_samples_are_views_sharing_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<u32> = (0..40).map(|t| t * 1_601).collect();
    let mut bytes = Vec::new();
    TokenDtype::U16.encode(&ids, &mut bytes).unwrap();
    std::fs::write(dir.path().join("train.bin"), bytes).unwrap();
    let opts = FormatOptions::default().seq_len(5).dtype(TokenDtype::U16);
    let ds = Dataset::from_path_with("d", dir.path(), &opts).unwrap();
    let r = read(&ds, &[7, 2]);
    assert!(matches!(r[0].get("tokens"), Some(Value::TokenView(_))));
    assert_eq!(r[0].token_ids("tokens").unwrap(), ids[35..40]);
    assert_eq!(r[1].token_ids("tokens").unwrap(), ids[10..15]);
    assert!(FieldName::ptr_eq(
        name(&r[0], "tokens"),
        name(&r[1], "tokens")
    ));
}
