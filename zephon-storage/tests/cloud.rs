//! Reading `gs://` and `azblob://` datasets from real emulators on
//! 127.0.0.1 (gcp-storage-emulator, Azurite): the same records as a local
//! read, the shard cache serving a second pass, manifests kept inside the
//! dataset's root, a clear, bounded error when the server dies, and an
//! object overwritten in place during a run refused by its version, never
//! read as a mix of both.

use crate::common;

use common::cloud::{AZURITE_ACCOUNT, AZURITE_KEY, Azurite, GcsEmulator, ObjectServer, put};
use common::{cache_opts, fields, indexed_dataset, read_all, set_sums, small_cache, write_dataset};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use zephon_core::Dataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::{CacheOptions, RemoteDataset, StorageOptions, UriDatasetExt};

fn parity_and_cache(server: &impl ObjectServer, t: &Path) {
    let data = t.join("data");
    let want = indexed_dataset(&data, 3, 60);
    server.upload("bkt", "ds", &data);
    let uri = server.uri("bkt", "ds");
    let rd = RemoteDataset::open("d", &uri, &server.opts(cache_opts(t))).unwrap();
    assert_eq!(fields(&read_all(rd.dataset().clone(), true).unwrap()), want);
    let shards = ["ds/000.jsonl", "ds/001.jsonl", "ds/002.jsonl"];
    let first: Vec<usize> = shards.iter().map(|k| server.downloads("bkt", k)).collect();
    assert_eq!(first, vec![1, 1, 1], "one download per shard of {uri}");
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    let second: Vec<usize> = shards.iter().map(|k| server.downloads("bkt", k)).collect();
    assert_eq!(second, first, "the second pass downloads nothing");
    let stats = rd.cache_stats();
    assert_eq!(stats.misses, 3, "{stats:?}");
    assert!(stats.hits > 0 && !stats.thrashing, "{stats:?}");
}

fn listing_and_ranges(server: &impl ObjectServer, t: &Path) {
    let (data, bare) = (t.join("data"), t.join("bare"));
    let want = indexed_dataset(&data, 2, 40);
    write_dataset(&bare, 2, 40);
    server.upload("bkt", "bare", &bare);
    server.upload("bkt", "idx", &data);
    let opts = server.opts(cache_opts(t));
    let listed = Dataset::from_uri_with("d", &server.uri("bkt", "bare"), &opts).unwrap();
    assert_eq!(fields(&read_all(listed, false).unwrap()), want);
    let ranged = Dataset::from_uri_with(
        "d",
        &server.uri("bkt", "idx"),
        &opts.clone().byte_range(true),
    )
    .unwrap();
    assert_eq!(fields(&read_all(ranged, true).unwrap()), want);
    assert_eq!(
        server.downloads("bkt", "idx/000.jsonl") + server.downloads("bkt", "idx/001.jsonl"),
        0,
        "range mode never downloads a whole shard"
    );
    assert!(
        server.reads("idx") > 0,
        "the ranged reads reached the server"
    );
}

const SECRET: &str = "{\"secret\":\"outside the root\"}\n";
const FOUR: &str = "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n";

fn manifests_stay_in_the_root(server: &impl ObjectServer, t: &Path) {
    let (ds, other) = (t.join("ds"), t.join("other"));
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(ds.join("a.jsonl"), FOUR).unwrap();
    std::fs::write(other.join("secret.jsonl"), SECRET).unwrap();
    server.upload("data", "ds", &ds);
    server.upload("data", "", &other);
    server.upload("other", "", &other);
    let scheme = server.scheme();
    let inner = Backend::open(
        "w",
        &server.uri("data", "ds"),
        &server.opts(Default::default()),
    )
    .unwrap();
    let other_bucket = format!("{scheme}://other/secret.jsonl");
    for (entry, why) in [
        ("../secret.jsonl", "`..`"),
        ("../../other/secret.jsonl", "`..`"),
        ("sub/../../secret.jsonl", "`..`"),
        ("/secret.jsonl", "absolute"),
        (other_bucket.as_str(), "URI"),
    ] {
        let manifest = json!({"version": 1, "shards": [
            {"path": "a.jsonl", "samples": 4, "bytes": FOUR.len()},
            {"path": entry, "samples": 1, "bytes": SECRET.len()},
        ]});
        put(&inner, "index.json", manifest.to_string());
        for byte_range in [false, true] {
            let opts = server
                .opts(cache_opts(t).cache(CacheOptions::default().enabled(false)))
                .byte_range(byte_range);
            match RemoteDataset::open("esc", &server.uri("data", "ds"), &opts) {
                Ok(d) => panic!(
                    "{entry:?} was followed: {:?}",
                    read_all(d.dataset().clone(), false).map(|r| fields(&r))
                ),
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains("index.json"), "no manifest named: {e}");
                    assert!(e.contains(&format!("{entry:?}")), "no entry named: {e}");
                    assert!(e.contains(why) && e.contains("shards[1]"), "{e}");
                }
            }
        }
    }
    assert_eq!(
        server.reads("secret"),
        0,
        "nothing outside the root was read"
    );
}

/// A shard of some 7 blocks read at its first block, then overwritten in
/// place with other bytes of the same length: reading its last block is an
/// error naming the shard, never the new version's bytes, and a new run
/// reads the new version only. Azurite honours `If-Match`, so the error
/// names the change. gcp-storage-emulator honours neither `If-Match` nor
/// `ifGenerationMatch` (Google Cloud Storage does) and names no version in
/// its answers: there the manifest's per-chunk sums (`sums`) catch the
/// other bytes, and the new run reads the new version once its manifest
/// is rebuilt.
fn overwritten_in_place(server: &impl ObjectServer, t: &Path, sums: bool) {
    let data = t.join("data");
    indexed_dataset(&data, 1, 6000);
    set_sums(&data, sums);
    server.upload("bkt", "ds", &data);
    let uri = server.uri("bkt", "ds");
    let opts = server.opts(small_cache(t, 1 << 20, 4 << 20));
    let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
    let s = rd.dataset().shards()[0].clone();
    let first = runtime::block_on(s.read_run(0, 1)).unwrap();
    let old = std::fs::read(data.join("000.jsonl")).unwrap();
    let new = String::from_utf8(old.clone())
        .unwrap()
        .replace("sample", "SAMPLE");
    assert_eq!(new.len(), old.len());
    let b = Backend::open("up", &uri, &server.opts(Default::default())).unwrap();
    put(&b, "000.jsonl", new.clone().into_bytes());
    let err = match runtime::block_on(s.read_run(5999, 1)) {
        Ok(r) => panic!("read {:?} of the new version mid-run", fields(&r)),
        Err(e) => e.to_string(),
    };
    let why = if sums { "CRC32C" } else { "changed" };
    assert!(
        err.contains(&format!("{uri}/000.jsonl")) && err.contains(why),
        "{err}"
    );
    if sums {
        std::fs::write(data.join("000.jsonl"), &new).unwrap();
        let local = Backend::open("d", &data.display().to_string(), &Default::default()).unwrap();
        runtime::block_on(zephon_storage::scan::build_index(&local, "d")).unwrap();
        set_sums(&data, true);
        server.upload("bkt", "ds", &data);
    }
    let again = RemoteDataset::open("d", &uri, &opts).unwrap();
    let s = again.dataset().shards()[0].clone();
    let now = runtime::block_on(s.read_run(0, 1)).unwrap();
    assert_ne!(fields(&now), fields(&first));
    assert!(fields(&now)[0].contains("SAMPLE 0"), "{:?}", fields(&now));
    let last = runtime::block_on(s.read_run(5999, 1)).unwrap();
    assert!(
        fields(&last)[0].contains("SAMPLE 5999"),
        "{:?}",
        fields(&last)
    );
}

#[test]
fn gcs_an_object_overwritten_in_place_is_caught_by_its_chunk_sums() {
    let t = tempfile::tempdir().unwrap();
    overwritten_in_place(&GcsEmulator::start(t.path()), t.path(), true);
}

#[test]
fn azblob_an_object_overwritten_in_place_is_refused_and_a_new_run_reads_it() {
    let t = tempfile::tempdir().unwrap();
    overwritten_in_place(&Azurite::start(t.path()), t.path(), false);
}

fn a_killed_server_is_a_bounded_error_naming_the_uri(server: &mut impl ObjectServer, t: &Path) {
    let data = t.join("data");
    indexed_dataset(&data, 1, 50);
    server.upload("bkt", "ds", &data);
    let uri = server.uri("bkt", "ds");
    let rd = RemoteDataset::open("d", &uri, &server.opts(cache_opts(t))).unwrap();
    server.kill();
    let started = Instant::now();
    let err = runtime::block_on(rd.dataset().shards()[0].read_run(0, 1));
    let took = started.elapsed();
    let err = err.unwrap_err().to_string();
    assert!(err.contains(&format!("{uri}/000.jsonl")), "{err}");
    // 1 s per attempt, 3 attempts, short backoff: well under 10 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(rd.backend_stats().retries >= 1, "{:?}", rd.backend_stats());
    assert!(!rd.is_cached(0));
}

#[test]
fn gcs_reads_like_local_and_the_second_pass_is_served_from_the_cache() {
    let t = tempfile::tempdir().unwrap();
    parity_and_cache(&GcsEmulator::start(t.path()), t.path());
}

#[test]
fn gcs_without_manifest_is_listed_and_indexed_shards_are_read_by_range() {
    let t = tempfile::tempdir().unwrap();
    listing_and_ranges(&GcsEmulator::start(t.path()), t.path());
}

#[test]
fn gcs_manifests_reach_neither_outside_the_prefix_nor_another_bucket() {
    let t = tempfile::tempdir().unwrap();
    manifests_stay_in_the_root(&GcsEmulator::start(t.path()), t.path());
}

#[test]
fn gcs_a_killed_server_gives_an_error_naming_the_uri_within_the_timeout() {
    let t = tempfile::tempdir().unwrap();
    a_killed_server_is_a_bounded_error_naming_the_uri(&mut GcsEmulator::start(t.path()), t.path());
}

#[test]
fn azblob_reads_like_local_and_the_second_pass_is_served_from_the_cache() {
    let t = tempfile::tempdir().unwrap();
    parity_and_cache(&Azurite::start(t.path()), t.path());
}

#[test]
fn azblob_without_manifest_is_listed_and_indexed_shards_are_read_by_range() {
    let t = tempfile::tempdir().unwrap();
    listing_and_ranges(&Azurite::start(t.path()), t.path());
}

#[test]
fn azblob_manifests_reach_neither_outside_the_prefix_nor_another_container() {
    let t = tempfile::tempdir().unwrap();
    manifests_stay_in_the_root(&Azurite::start(t.path()), t.path());
}

#[test]
fn azblob_a_killed_server_gives_an_error_naming_the_uri_within_the_timeout() {
    let t = tempfile::tempdir().unwrap();
    a_killed_server_is_a_bounded_error_naming_the_uri(&mut Azurite::start(t.path()), t.path());
}

#[test]
fn azblob_anonymous_reads_a_public_container_and_is_refused_by_a_private_one() {
    let t = tempfile::tempdir().unwrap();
    let server = Azurite::start(t.path());
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 20);
    server.create_container("open", true);
    server.upload("open", "ds", &data);
    server.upload("closed", "ds", &data);
    // The key would open the private container: anonymous must not send it.
    let opts = server.opts(cache_opts(t.path())).anonymous(true);
    let public = Dataset::from_uri_with("d", &server.uri("open", "ds"), &opts).unwrap();
    assert_eq!(fields(&read_all(public, false).unwrap()), want);
    let uri = server.uri("closed", "ds");
    let err = common::open_error(
        &uri,
        &opts,
        "a private container opened without credentials",
    );
    assert!(err.contains(&uri), "{err}");
}

#[test]
fn azblob_reads_with_a_sas_token_and_refuses_a_forged_one() {
    let t = tempfile::tempdir().unwrap();
    let server = Azurite::start(t.path());
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 20);
    server.upload("bkt", "ds", &data);
    let uri = server.uri("bkt", "ds");
    // A wrong key beside the token: the token must be what signs.
    let wrong_key = "d3Jvbmcga2V5";
    let with = |sas: &str| {
        cache_opts(t.path())
            .endpoint(&server.endpoint())
            .account_name(AZURITE_ACCOUNT)
            .account_key(wrong_key)
            .sas_token(sas)
    };
    let sas = Azurite::account_sas(AZURITE_KEY);
    let ds = Dataset::from_uri_with("d", &uri, &with(&sas)).unwrap();
    assert_eq!(fields(&read_all(ds, false).unwrap()), want);
    let forged = Azurite::account_sas(wrong_key);
    let err = common::open_error(
        &uri,
        &with(&forged),
        "a forged SAS token opened the container",
    );
    assert!(err.contains(&uri), "{err}");
}

#[test]
fn a_cloud_uri_without_bucket_or_container_is_refused() {
    for (uri, want) in [
        ("gs:///ds", "gs://bucket/prefix"),
        ("azblob:///ds", "azblob://container/prefix"),
    ] {
        let err = Backend::open("d", uri, &StorageOptions::default()).unwrap_err();
        assert!(err.to_string().contains(want), "{uri}: {err}");
    }
}

/// Environment variables that would otherwise steer the child's backend.
const CLOUD_ENV: &[&str] = &[
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
];

/// Reads `uri` with `Dataset::from_uri` (no options: endpoint and
/// credentials from `envs` alone) in a child process, since a test cannot
/// set its own environment safely; returns the records' fields.
fn read_in_a_child_with_env(t: &Path, uri: &str, envs: &[(&str, String)]) -> Vec<String> {
    let out = t.join("child-records.txt");
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        // The test's name in the suite binary (tests/suite.rs).
        "cloud::from_uri_child_reads_with_the_environment_alone",
        "--ignored",
        "--nocapture",
    ]);
    for k in CLOUD_ENV {
        cmd.env_remove(k);
    }
    // Should the environment not be read, the child must not reach out to
    // the real services: anything not on loopback goes to a dead proxy.
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env(k, "http://127.0.0.1:9")
            .env(k.to_ascii_lowercase(), "http://127.0.0.1:9");
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    cmd.env("ZEPHON_TEST_CHILD_URI", uri)
        .env("ZEPHON_TEST_CHILD_OUT", &out)
        .env("ZEPHON_CACHE_DIR", t.join("child-cache"))
        .envs(envs.iter().map(|(k, v)| (*k, v)));
    let status = cmd.output().unwrap();
    assert!(
        status.status.success(),
        "the child failed: {}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the child wrote no records ({e})"))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The child of [`read_in_a_child_with_env`]; does nothing when run on its own.
#[test]
#[ignore = "run by the environment tests in a child process"]
fn from_uri_child_reads_with_the_environment_alone() {
    let (Ok(uri), Ok(out)) = (
        std::env::var("ZEPHON_TEST_CHILD_URI"),
        std::env::var("ZEPHON_TEST_CHILD_OUT"),
    ) else {
        return;
    };
    let ds = Dataset::from_uri("env", &uri).unwrap();
    std::fs::write(out, fields(&read_all(ds, false).unwrap()).join("\n")).unwrap();
}

#[test]
fn gcs_takes_the_emulator_from_storage_emulator_host() {
    let t = tempfile::tempdir().unwrap();
    let server = GcsEmulator::start(t.path());
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 30);
    server.upload("bkt", "ds", &data);
    let envs = [(
        "STORAGE_EMULATOR_HOST",
        format!("127.0.0.1:{}", server.port),
    )];
    let got = read_in_a_child_with_env(t.path(), "gs://bkt/ds", &envs);
    assert_eq!(got, want);
}

#[test]
fn azblob_takes_account_endpoint_and_key_from_the_connection_string() {
    let t = tempfile::tempdir().unwrap();
    let server = Azurite::start(t.path());
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 30);
    server.upload("bkt", "ds", &data);
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};\
         BlobEndpoint={};",
        server.endpoint()
    );
    let envs = [("AZURE_STORAGE_CONNECTION_STRING", conn)];
    let got = read_in_a_child_with_env(t.path(), "azblob://bkt/ds", &envs);
    assert_eq!(got, want);
}
