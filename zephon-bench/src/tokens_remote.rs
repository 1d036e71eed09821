//! `zephon-bench tokens --uri URI | --serve http|s3`: the W2 workload read
//! from a remote copy of the token file, beside the local file in the same
//! round. A global shuffle reads windows by byte range (many requests in
//! flight, neighbours coalesced); a block shuffle reads through the block
//! cache, once with a fresh cache (cold) and once more with it (warm).
//! Each pass runs in a process of its own (this binary, `--child`), so its
//! line's peak anonymous memory is its own, and a pass from a server started
//! here reports the CPU that server spent on it (`server_cpu_s`).
//!
//! A ratio to the local pass says how far the remote one is from it, not
//! how far it is from what this machine allows: each round also times a
//! plain download of the file from the same server (`download`), and each
//! remote line carries the ceilings the CPU spent puts on its ratio
//! (`server_bound_ratio_to_local`, `cpu_bound_ratio_to_local`).

use super::servers::{
    Server, cpu_time, put_files, start_moto, start_nginx, start_s3s, tree_cpu_time, upload,
};
use super::stats::round3;
use super::tokens::{Args, Run, Source, keep, mb, measure_from};
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
        .range_part_gap(a.range_part_gap)
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
                .limit_bytes(8 << 30)
                .block_bytes(a.cache_block_bytes),
        ),
        other => bail!("--child: unknown pass `{other}`"),
    })
}

/// One pass (`--child KIND`) in this process: prints its run as one JSON
/// object for [`spawn_pass`], with the CPU time the process spent.
pub fn child(a: &Args, dtype: TokenDtype, wide: bool, kind: &str) -> Result<()> {
    let run = if kind == "download" {
        download(a, dtype)?
    } else {
        pass(a, dtype, wide, kind)?
    };
    let cpu = cpu_time(std::process::id()).map(|c| c.as_secs_f64());
    let out = serde_json::json!({
        "line": run.line,
        "seconds": run.seconds,
        "peak_anon": run.peak_anon,
        "cpu_s": cpu,
    });
    println!("{out}");
    Ok(())
}

/// Every shard of the remote dataset read start to end in one sequential
/// stream each and dropped as it comes: what the server and the transport
/// alone give, the bound of any pass that reads each byte once (a cold
/// block-cache pass). The shards are found first (the manifest, or a
/// listing), untimed, so the time is the transfer's alone. Its
/// `tokens_per_s` counts the tokens those bytes hold, so its ratio to the
/// local pass compares times.
fn download(a: &Args, dtype: TokenDtype) -> Result<Run> {
    use futures::TryStreamExt;
    let uri = a.uri.as_deref().context("--child download needs --uri")?;
    let mut opts = pass_options(a, "ranges")?;
    opts.format = opts.format.seq_len(a.seq_len + 1).dtype(dtype);
    let ds = zephon_storage::RemoteDataset::open("w2", uri, &opts)?;
    let sampler = super::mem::PeakRss::start();
    let start = std::time::Instant::now();
    let op = ds.backend().op.clone();
    let paths: Vec<String> = ds
        .manifest()
        .shards
        .iter()
        .map(|s| s.path.clone())
        .collect();
    let bytes = runtime::block_on(async move {
        let mut n = 0u64;
        for path in &paths {
            let read = async {
                let mut body = op.reader(path).await?.into_bytes_stream(..).await?;
                while let Some(chunk) = body.try_next().await? {
                    n += chunk.len() as u64;
                }
                anyhow::Ok(())
            };
            read.await
                .with_context(|| format!("downloading `{path}` of {uri}"))?;
        }
        anyhow::Ok(n)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = sampler.stop().unwrap_or(0);
    let tokens = bytes / dtype.size() as u64;
    let line = serde_json::json!({
        "system": "download",
        "bytes": bytes,
        "tokens": tokens,
        "seconds": round3(seconds),
        "tokens_per_s": (tokens as f64 / seconds).round(),
        "peak_rss_anon_mb": mb(peak_anon),
    });
    Ok(Run {
        line,
        seconds,
        peak_anon,
    })
}

/// One pass of the workload (`local`, `ranges` or `cache`) in this process.
fn pass(a: &Args, dtype: TokenDtype, wide: bool, kind: &str) -> Result<Run> {
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
    measure_from(a, dtype, wide, &source, prefetch)
}

/// Where the passes read the remote copy from.
struct Remote {
    uri: String,
    endpoint: Option<String>,
    /// Credentials and region of a moto_server this run started.
    served_s3: bool,
}

/// One pass's figures, with the CPU time each side spent in it.
struct Pass {
    run: Run,
    /// The reading process's own CPU time, opening included.
    cpu: Option<f64>,
    /// The server's, where this run started it.
    server_cpu: Option<f64>,
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
) -> Result<Pass> {
    let exe = std::env::current_exe().context("the path of this binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("tokens").arg("--file").arg(&a.file);
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
        ("--cache-block-bytes", a.cache_block_bytes.to_string()),
        ("--range-concurrency", a.range_concurrency.to_string()),
        ("--range-gap", a.range_gap.to_string()),
        ("--range-part-gap", a.range_part_gap.to_string()),
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
    let cpu_before = server.and_then(tree_cpu_time);
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting a benchmark process")?;
    let server_cpu = match (cpu_before, server.and_then(tree_cpu_time)) {
        (Some(b), Some(e)) => Some(round3((e - b).as_secs_f64())),
        _ => None,
    };
    if !out.status.success() {
        bail!("the `{kind}` pass failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = (|| -> Option<Pass> {
        let v: serde_json::Value = serde_json::from_str(text.lines().last()?).ok()?;
        let run = Run {
            line: v["line"].clone(),
            seconds: v["seconds"].as_f64()?,
            peak_anon: v["peak_anon"].as_u64()?,
        };
        Some(Pass {
            run,
            cpu: v["cpu_s"].as_f64().map(round3),
            server_cpu,
        })
    })();
    parsed.with_context(|| format!("the `{kind}` pass printed {text:?}"))
}

/// The ceilings a remote pass's ratio to the local one meets on this
/// machine's `cores`: `server_bound` (the server's CPU alone, spread over
/// the `server_cores` it works on at once, no more than the machine's,
/// takes at least `server_cpu / server_cores` of wall time: no reader gets
/// past that) and `cpu_bound` (the reader's and the server's CPU together,
/// spread over every core: a pass near it is bound by CPU, not by
/// waiting).
fn bounds(
    local_seconds: f64,
    cores: usize,
    server_cores: usize,
    cpu: Option<f64>,
    server_cpu: Option<f64>,
) -> [(&'static str, Option<f64>); 2] {
    let bound = |spent: f64, on: usize| {
        (spent > 0.0).then(|| round3(local_seconds * on.clamp(1, cores.max(1)) as f64 / spent))
    };
    [
        (
            "server_bound_ratio_to_local",
            server_cpu.and_then(|s| bound(s, server_cores)),
        ),
        (
            "cpu_bound_ratio_to_local",
            server_cpu.zip(cpu).and_then(|(s, c)| bound(s + c, cores)),
        ),
    ]
}

/// Keeps the faster pass, with its CPU figures (those of the round whose
/// run is kept), and the larger memory peak of the two.
fn keep_pass(slot: &mut Option<Pass>, pass: Pass) {
    // The same choice as `keep`: the run kept so far wins a tie.
    let (cpu, server_cpu) = match slot {
        Some(s) if s.run.seconds <= pass.run.seconds => (s.cpu, s.server_cpu),
        _ => (pass.cpu, pass.server_cpu),
    };
    let mut run = slot.take().map(|s| s.run);
    keep(&mut run, pass.run);
    *slot = run.map(|run| Pass {
        run,
        cpu,
        server_cpu,
    });
}

/// Runs local and remote passes, alternating, each in its own process, and
/// prints one JSON line per configuration: the local pass, a plain
/// download of the remote file (the transport's own pace), then each
/// remote pass, each with its ratios to the local run and the ceilings
/// the CPU of this machine puts on them ([`bounds`]).
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
            let (server, uri) = start_nginx(&tmp.path().join("nginx"), &data, &a.nginx_http)?
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
    let server_cores = servers.first().map_or(1, Server::cores);
    // (label, pass kind): the remote configurations of this order, after
    // the plain download that bounds them.
    let configs: &[(&str, &str)] = match a.shuffle.as_str() {
        "global" => &[("download", "download"), ("zephon-ranges", "ranges")],
        _ => &[
            ("download", "download"),
            ("zephon-cache-cold", "cache"),
            ("zephon-cache-warm", "cache"),
        ],
    };
    let mut local: Option<Pass> = None;
    let mut remote_runs: Vec<Option<Pass>> = configs.iter().map(|_| None).collect();
    for round in 0..a.repeat.max(1) {
        // Alternate who goes first, so neither always meets a warmer machine.
        if round % 2 == 0 {
            keep_pass(&mut local, spawn_pass(a, "local", &remote, None, None)?);
        }
        // Cold and warm share the round's folder: the warm pass opens the
        // cache the cold one filled.
        let cache_dir = tmp.path().join("cache").join(round.to_string());
        for ((_, kind), slot) in configs.iter().zip(remote_runs.iter_mut()) {
            keep_pass(
                slot,
                spawn_pass(a, kind, &remote, Some(&cache_dir), server)?,
            );
        }
        if round % 2 == 1 {
            keep_pass(&mut local, spawn_pass(a, "local", &remote, None, None)?);
        }
    }
    let local = local.expect("at least one round");
    let cores = zephon_core::runner::num_cpus();
    let mut local_line = local.run.line.clone();
    local_line["cpu_s"] = local.cpu.into();
    local_line["cores"] = cores.into();
    println!("{local_line}");
    let mut download: Option<f64> = None;
    for ((label, kind), pass) in configs.iter().zip(remote_runs) {
        let pass = pass.expect("at least one round");
        let mut line = pass.run.line;
        // Each remote pass beside the transport's own pace: the figure that
        // says how much of the gap to the local pass is the reader's.
        let tokens_per_s = line["tokens_per_s"].as_f64();
        if *kind == "download" {
            download = tokens_per_s;
        } else if let (Some(r), Some(d)) = (tokens_per_s, download.filter(|&d| d > 0.0)) {
            line["tokens_per_s_ratio_to_download"] = round3(r / d).into();
        }
        line["system"] = (*label).into();
        line["uri"] = remote.uri.clone().into();
        if a.serve.as_deref() == Some("http") {
            line["nginx_http"] = a.nginx_http.clone().into();
        }
        if a.shuffle == "global" && *kind == "ranges" {
            line["range_concurrency"] = a.range_concurrency.into();
            line["range_gap"] = a.range_gap.into();
            line["range_part_gap"] = a.range_part_gap.into();
            line["range_parts"] = a.range_parts.into();
        }
        line["cpu_s"] = pass.cpu.into();
        if let Some(cpu) = pass.server_cpu {
            line["server_cpu_s"] = cpu.into();
        }
        for (key, label) in [
            ("tokens_per_s", "tokens_per_s"),
            ("first_batch_s", "first_batch"),
            ("peak_rss_anon_mb", "peak_rss_anon"),
        ] {
            if line.get(key).is_none() {
                continue;
            }
            line[format!("{label}_ratio_to_local")] =
                match (line[key].as_f64(), local.run.line[key].as_f64()) {
                    (Some(r), Some(l)) if l > 0.0 => round3(r / l).into(),
                    _ => serde_json::Value::Null,
                };
        }
        line["server_cores"] = server.map(|_| server_cores).into();
        let ceilings = bounds(
            local.run.seconds,
            cores,
            server_cores,
            pass.cpu,
            pass.server_cpu,
        );
        for (key, bound) in ceilings {
            line[key] = bound.into();
        }
        println!("{line}");
    }
    drop(servers);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Pass, Run, bounds, keep_pass};

    #[test]
    fn bounds_spread_the_cpu_spent_over_the_cores() {
        // A local pass of 0.1 s on 2 cores; the server, on both, spent
        // 0.5 s: no remote pass takes under 0.25 s, so none reaches 0.4x.
        // With the reader's 0.5 s, both sides need at least 0.5 s: 0.2x.
        let [(s, server), (c, cpu)] = bounds(0.1, 2, 2, Some(0.5), Some(0.5));
        assert_eq!(
            (s, c),
            ("server_bound_ratio_to_local", "cpu_bound_ratio_to_local")
        );
        assert_eq!((server, cpu), (Some(0.4), Some(0.2)));
        // A server working on one core at a time takes all of its 0.5 s;
        // one claiming more cores than the machine has gets the machine's.
        let [(_, server), (_, cpu)] = bounds(0.1, 2, 1, Some(0.5), Some(0.5));
        assert_eq!((server, cpu), (Some(0.2), Some(0.2)));
        let [(_, server), _] = bounds(0.1, 2, 16, Some(0.5), Some(0.5));
        assert_eq!(server, Some(0.4));
        // A server that spent no measurable CPU gives no bound, never an
        // infinite one; nor does a server not started here.
        let [(_, server), (_, cpu)] = bounds(0.1, 2, 2, Some(0.5), Some(0.0));
        assert_eq!((server, cpu), (None, Some(0.4)));
        let [(_, server), (_, cpu)] = bounds(0.1, 2, 2, Some(0.5), None);
        assert_eq!((server, cpu), (None, None));
    }

    fn pass(seconds: f64, peak_anon: u64, cpu: f64) -> Pass {
        Pass {
            run: Run {
                line: serde_json::json!({ "seconds": seconds }),
                seconds,
                peak_anon,
            },
            cpu: Some(cpu),
            server_cpu: Some(cpu * 2.0),
        }
    }

    #[test]
    fn the_faster_pass_is_kept_with_its_own_cpu_and_the_larger_peak() {
        let mut slot = None;
        keep_pass(&mut slot, pass(2.0, 10, 1.0));
        keep_pass(&mut slot, pass(1.0, 5, 0.5));
        keep_pass(&mut slot, pass(3.0, 20, 3.0));
        let kept = slot.unwrap();
        assert_eq!(kept.run.seconds, 1.0);
        assert_eq!((kept.cpu, kept.server_cpu), (Some(0.5), Some(1.0)));
        assert_eq!(kept.run.peak_anon, 20);
    }
}
