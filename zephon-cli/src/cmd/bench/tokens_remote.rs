//! `zephon bench tokens --uri URI | --serve http|s3`: the W2 workload read
//! from a remote copy of the token file, beside the local file in the same
//! round. A global shuffle reads windows by byte range (many requests in
//! flight, neighbours coalesced); a block shuffle reads through the block
//! cache, once with a fresh cache (cold) and once more with it (warm).
//! Each pass runs in a process of its own (this binary, `--child`), so its
//! line's peak anonymous memory is its own, and a pass from a server started
//! here reports the CPU that server spent on it (`server_cpu_s`).

use super::servers::{Server, cpu_time, put_files, start_moto, start_nginx, start_s3s, upload};
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

/// The options a remote pass of `kind` (`ranges`, `cache`) reads with.
fn pass_options(a: &Args, kind: &str) -> Result<StorageOptions> {
    let mut o = StorageOptions::default()
        .range_concurrency(a.range_concurrency)
        .range_gap(a.range_gap)
        .range_parts(a.range_parts);
    if let Some(e) = &a.endpoint {
        o = o.endpoint(e);
    }
    Ok(match kind {
        "ranges" => o
            .byte_range(true)
            .cache(CacheOptions::default().enabled(false)),
        "cache" => o.cache(
            CacheOptions::default()
                .root(
                    a.cache_dir
                        .as_ref()
                        .context("--child cache needs --cache-dir")?,
                )
                .limit_bytes(8 << 30),
        ),
        other => bail!("--child: unknown pass `{other}`"),
    })
}

/// One pass (`--child KIND`) in this process: prints its run as one JSON
/// object for [`spawn_pass`].
pub fn child(a: &Args, dtype: TokenDtype, wide: bool, kind: &str) -> Result<()> {
    let source = match kind {
        "local" => Source::Local,
        _ => Source::Remote {
            uri: a
                .uri
                .clone()
                .context("--child: a remote pass needs --uri")?,
            opts: Box::new(pass_options(a, kind)?),
        },
    };
    // The local file has nothing to warm: its pass runs without the stage,
    // which costs it time and memory for nothing.
    let prefetch = if a.shuffle == "block" && kind != "local" {
        a.prefetch
    } else {
        0
    };
    let run = measure_from(a, dtype, wide, &source, prefetch)?;
    let out = serde_json::json!({
        "line": run.line,
        "seconds": run.seconds,
        "peak_anon": run.peak_anon,
    });
    println!("{out}");
    Ok(())
}

/// Where the passes read the remote copy from.
struct Remote {
    uri: String,
    endpoint: Option<String>,
    /// Credentials and region of a moto_server this run started.
    served_s3: bool,
}

/// Runs pass `kind` in a fresh process of this binary, so that its peak
/// anonymous memory is its own, not what an earlier pass left in this
/// process's allocator; with `server`, the CPU that server spent in it.
fn spawn_pass(
    a: &Args,
    kind: &str,
    remote: &Remote,
    cache_dir: Option<&Path>,
    server: Option<u32>,
) -> Result<(Run, Option<f64>)> {
    let exe = std::env::current_exe().context("the path of this binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("bench").arg("tokens").arg("--file").arg(&a.file);
    for (flag, v) in [
        ("--seq-len", a.seq_len.to_string()),
        ("--batch", a.batch.to_string()),
        ("--seed", a.seed.to_string()),
        ("--dtype", a.dtype.clone()),
        ("--collate", a.collate.clone()),
        ("--parallelism", a.parallelism.to_string()),
        ("--max-group", a.max_group.to_string()),
        ("--shuffle", a.shuffle.clone()),
        ("--block-size", a.block_size.to_string()),
        ("--prefetch", a.prefetch.to_string()),
        ("--range-concurrency", a.range_concurrency.to_string()),
        ("--range-gap", a.range_gap.to_string()),
        ("--range-parts", a.range_parts.to_string()),
        ("--uri", remote.uri.clone()),
        ("--child", kind.to_owned()),
    ] {
        cmd.arg(flag).arg(v);
    }
    if let Some(e) = &remote.endpoint {
        cmd.arg("--endpoint").arg(e);
    }
    if let Some(d) = cache_dir {
        cmd.arg("--cache-dir").arg(d);
    }
    if remote.served_s3 {
        cmd.env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_SESSION_TOKEN");
    }
    let cpu_before = server.and_then(cpu_time);
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting a benchmark process")?;
    let server_cpu = match (cpu_before, server.and_then(cpu_time)) {
        (Some(b), Some(e)) => Some(round3((e - b).as_secs_f64())),
        _ => None,
    };
    if !out.status.success() {
        bail!("the `{kind}` pass failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = (|| -> Option<Run> {
        let v: serde_json::Value = serde_json::from_str(text.lines().last()?).ok()?;
        Some(Run {
            line: v["line"].clone(),
            seconds: v["seconds"].as_f64()?,
            peak_anon: v["peak_anon"].as_u64()?,
        })
    })();
    let run = parsed.with_context(|| format!("the `{kind}` pass printed {text:?}"))?;
    Ok((run, server_cpu))
}

/// Runs local and remote passes, alternating, each in its own process, and
/// prints one JSON line per configuration, each remote one with its ratios
/// to the local run.
pub fn run(a: &Args, dtype: TokenDtype) -> Result<()> {
    let parent = a
        .file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::tempdir_in(parent).or_else(|_| tempfile::tempdir())?;
    let mut servers: Vec<Server> = Vec::new();
    let remote = match (a.serve.as_deref(), &a.uri) {
        (None, Some(u)) => Remote {
            uri: u.clone(),
            endpoint: a.endpoint.clone(),
            served_s3: false,
        },
        (Some("http"), _) => {
            let data = tmp.path().join("data");
            dataset_folder(a, dtype, &data)?;
            let (server, uri) = start_nginx(&tmp.path().join("nginx"), &data)?
                .context("--serve http needs nginx (apt-get install nginx-light)")?;
            servers.push(server);
            Remote {
                uri,
                endpoint: None,
                served_s3: false,
            }
        }
        (Some(kind @ ("s3" | "s3s")), _) => {
            let data = tmp.path().join("data");
            dataset_folder(a, dtype, &data)?;
            let (server, endpoint, uri) = if kind == "s3" {
                let (server, endpoint) = start_moto()?;
                let uri = upload(&endpoint, &data)?;
                (server, endpoint, uri)
            } else {
                let (server, endpoint, bucket) = start_s3s(&tmp.path().join("s3s"))?;
                let uri = put_files(&endpoint, &bucket, &data)?;
                (server, endpoint, uri)
            };
            servers.push(server);
            Remote {
                uri,
                endpoint: Some(endpoint),
                served_s3: true,
            }
        }
        (Some(other), _) => bail!("--serve: `{other}` is none of http, s3, s3s"),
        (None, None) => unreachable!("called for remote runs only"),
    };
    let server = servers.first().map(Server::pid);
    // (label, pass kind): the remote configurations of this order.
    let configs: &[(&str, &str)] = match a.shuffle.as_str() {
        "global" => &[("ranges", "ranges")],
        _ => &[("cache-cold", "cache"), ("cache-warm", "cache")],
    };
    let mut local: Option<Run> = None;
    let mut remote_runs: Vec<Option<Run>> = vec![None; configs.len()];
    let mut server_cpu: Vec<Option<f64>> = vec![None; configs.len()];
    for round in 0..a.repeat.max(1) {
        // Alternate who goes first, so neither always meets a warmer machine.
        if round % 2 == 0 {
            keep(&mut local, spawn_pass(a, "local", &remote, None, None)?.0);
        }
        // Cold and warm share the round's folder: the warm pass opens the
        // cache the cold one filled.
        let cache_dir = tmp.path().join("cache").join(round.to_string());
        for (((_, kind), slot), cpu) in configs
            .iter()
            .zip(remote_runs.iter_mut())
            .zip(server_cpu.iter_mut())
        {
            let (run, used) = spawn_pass(a, kind, &remote, Some(&cache_dir), server)?;
            // The server's CPU in the round whose run is kept.
            if slot.as_ref().is_none_or(|s| run.seconds < s.seconds) {
                *cpu = used;
            }
            keep(slot, run);
        }
        if round % 2 == 1 {
            keep(&mut local, spawn_pass(a, "local", &remote, None, None)?.0);
        }
    }
    let local = local.expect("at least one round");
    println!("{}", local.line);
    for (((label, _), run), cpu) in configs.iter().zip(remote_runs).zip(server_cpu) {
        let mut line = run.expect("at least one round").line;
        line["system"] = format!("zephon-{label}").into();
        line["uri"] = remote.uri.clone().into();
        if a.shuffle == "global" {
            line["range_concurrency"] = a.range_concurrency.into();
            line["range_gap"] = a.range_gap.into();
            line["range_parts"] = a.range_parts.into();
        }
        if let Some(cpu) = cpu {
            line["server_cpu_s"] = cpu.into();
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
