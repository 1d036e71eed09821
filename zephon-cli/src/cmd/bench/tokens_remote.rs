//! `zephon bench tokens --uri URI | --serve http|s3`: the W2 workload read
//! from a remote copy of the token file, beside the local file in the same
//! round. A global shuffle reads windows by byte range (many requests in
//! flight, neighbours coalesced); a block shuffle reads through the block
//! cache, once with a fresh cache (cold) and once more with it (warm).

use super::fetch::{Server, s3_opts, start_moto, start_nginx, upload};
use super::stats::round3;
use super::tokens::{Args, Run, Source, keep, measure_from};
use anyhow::{Context, Result, bail};
use std::path::Path;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::TokenDtype;
use zephon_storage::scan::build_index_with;
use zephon_storage::{CacheOptions, FormatOptions, StorageOptions};

/// A folder beside the file holding it as `train.bin` (a hard link, else a
/// copy) with its `index.json`, which HTTP needs.
fn dataset_folder(a: &Args, dtype: TokenDtype, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = dir.join("train.bin");
    if std::fs::hard_link(&a.file, &target).is_err() {
        std::fs::copy(&a.file, &target)
            .with_context(|| format!("copying {} to {}", a.file.display(), target.display()))?;
    }
    let b = Backend::open("w2", &dir.display().to_string(), &StorageOptions::default())?;
    let format = FormatOptions::default().seq_len(a.seq_len + 1).dtype(dtype);
    runtime::block_on(build_index_with(&b, "w2", &format))?;
    Ok(())
}

/// Runs local and remote passes, alternating, and prints one JSON line per
/// configuration, each remote one with its ratios to the local run.
pub fn run(a: &Args, dtype: TokenDtype, wide: bool) -> Result<()> {
    let parent = a
        .file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::tempdir_in(parent).or_else(|_| tempfile::tempdir())?;
    let mut servers: Vec<Server> = Vec::new();
    let mut base = StorageOptions::default()
        .range_concurrency(a.range_concurrency)
        .range_gap(a.range_gap)
        .range_parts(a.range_parts);
    let uri = match (a.serve.as_deref(), &a.uri) {
        (None, Some(u)) => {
            if let Some(e) = &a.endpoint {
                base = base.endpoint(e);
            }
            u.clone()
        }
        (Some("http"), _) => {
            let data = tmp.path().join("data");
            dataset_folder(a, dtype, &data)?;
            let (server, uri) = start_nginx(&tmp.path().join("nginx"), &data)?
                .context("--serve http needs nginx (apt-get install nginx-light)")?;
            servers.push(server);
            uri
        }
        (Some("s3"), _) => {
            let data = tmp.path().join("data");
            dataset_folder(a, dtype, &data)?;
            let (server, endpoint) = start_moto()?;
            servers.push(server);
            let uri = upload(&endpoint, &data)?;
            let o = s3_opts(&endpoint);
            base = base
                .endpoint(&endpoint)
                .region("us-east-1")
                .access_key_id(o.access_key_id.as_deref().unwrap_or("test"))
                .secret_access_key(o.secret_access_key.as_deref().unwrap_or("test"));
            uri
        }
        (Some(other), _) => bail!("--serve: `{other}` is neither http nor s3"),
        (None, None) => unreachable!("called for remote runs only"),
    };
    let cache_root = tmp.path().join("cache");
    let cache = move |round: usize| {
        CacheOptions::default()
            .root(cache_root.join(round.to_string()))
            .limit_bytes(8 << 30)
    };
    // (label, options for round r): the remote configurations of this order.
    type Config = (&'static str, Box<dyn Fn(usize) -> StorageOptions>);
    let configs: Vec<Config> = match a.shuffle.as_str() {
        "global" => {
            let b = base.clone();
            vec![(
                "ranges",
                Box::new(move |_| {
                    b.clone()
                        .byte_range(true)
                        .cache(CacheOptions::default().enabled(false))
                }),
            )]
        }
        _ => {
            let (b1, b2) = (base.clone(), base.clone());
            let (c1, c2) = (cache.clone(), cache);
            vec![
                ("cache-cold", Box::new(move |r| b1.clone().cache(c1(r)))),
                ("cache-warm", Box::new(move |r| b2.clone().cache(c2(r)))),
            ]
        }
    };
    let mut local: Option<Run> = None;
    let mut remote: Vec<Option<Run>> = vec![None; configs.len()];
    for round in 0..a.repeat.max(1) {
        // Alternate who goes first, so neither always meets a warmer machine.
        if round % 2 == 0 {
            keep(&mut local, measure_from(a, dtype, wide, &Source::Local)?);
        }
        for ((_, opts), slot) in configs.iter().zip(remote.iter_mut()) {
            let source = Source::Remote {
                uri: uri.clone(),
                opts: Box::new(opts(round)),
            };
            keep(slot, measure_from(a, dtype, wide, &source)?);
        }
        if round % 2 == 1 {
            keep(&mut local, measure_from(a, dtype, wide, &Source::Local)?);
        }
    }
    let local = local.expect("at least one round");
    println!("{}", local.line);
    for ((label, _), run) in configs.iter().zip(remote) {
        let mut line = run.expect("at least one round").line;
        line["system"] = format!("zephon-{label}").into();
        line["uri"] = uri.clone().into();
        if a.shuffle == "global" {
            line["range_concurrency"] = a.range_concurrency.into();
            line["range_gap"] = a.range_gap.into();
            line["range_parts"] = a.range_parts.into();
        }
        for (key, label) in [
            ("tokens_per_s", "tokens_per_s"),
            ("first_batch_s", "first_batch"),
            ("peak_rss_anon_mb", "peak_rss_anon"),
        ] {
            line[format!("{label}_ratio_to_local")] =
                match (line[key].as_f64(), local.line[key].as_f64()) {
                    (Some(r), Some(l)) if l > 0.0 => round3(r / l).into(),
                    _ => serde_json::Value::Null,
                };
        }
        println!("{line}");
    }
    drop(servers);
    Ok(())
}
