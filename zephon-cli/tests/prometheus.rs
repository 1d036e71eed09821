//! `zephon run --metrics-addr`, scraped by a real Prometheus server
//! (Debian's `prometheus`, which scripts/test.sh installs) started here on
//! 127.0.0.1: the per-operator series Prometheus stored equal the run's own
//! final metrics snapshot.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn prometheus_binary() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin"])
    {
        let p = PathBuf::from(dir).join("prometheus");
        if p.is_file() {
            return p;
        }
    }
    panic!("no `prometheus` binary (Debian package `prometheus`); scripts/test.sh installs it");
}

/// Stops the server when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(url: &str) -> Option<String> {
    ureq::get(url).call().ok()?.body_mut().read_to_string().ok()
}

/// Prometheus's value of every series of `metric`, by operator name.
fn query(prom: &str, metric: &str) -> Vec<(String, f64)> {
    let body = get(&format!("{prom}/api/v1/query?query={metric}")).unwrap_or_default();
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Vec::new();
    };
    v["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|s| {
                    (
                        s["metric"]["operator"].as_str().unwrap_or("").to_owned(),
                        s["value"][1].as_str().unwrap().parse().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn prometheus_scrapes_the_per_operator_series_of_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let (metrics_port, prom_port) = (free_port(), free_port());
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n\
             scrape_configs:\n  - job_name: zephon\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let _prometheus = Running(
        Command::new(prometheus_binary())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom = format!("http://127.0.0.1:{prom_port}");
    let started = Instant::now();
    while get(&format!("{prom}/-/ready")).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "Prometheus did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let recipe =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/recipes/fetch_batch.toml");
    let mut run = Running(
        Command::new(env!("CARGO_BIN_EXE_zephon"))
            .args(["run", "--json", "--observe", "60", "--max-batches", "12"])
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .args(["--metrics-hold", "120"])
            .arg(&recipe)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The final snapshot is printed before the hold; the server then
    // serves those figures, unchanged, until the hold ends. Stdout is read
    // to its end on a thread of its own: a pipe closed early would end the
    // run at its next line, and the hold with it.
    let stdout = run.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && let Some(m) = v.get("metrics")
            {
                let _ = tx.send(m.clone());
            }
        }
    });
    let snapshot = rx.recv_timeout(Duration::from_secs(120)).ok();
    let snapshot = snapshot.expect("the run's final metrics line");
    let ours: Vec<(String, f64)> = snapshot["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_owned(),
                o["elements_out"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(!ours.is_empty());

    let mut theirs = Vec::new();
    let started = Instant::now();
    // A loaded machine may miss scrapes for a while: wait well inside the
    // hold, which keeps the final figures served.
    while started.elapsed() < Duration::from_secs(100) {
        theirs = query(&prom, "zephon_operator_elements_out_total");
        theirs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want = ours.clone();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        if theirs == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut want = ours.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    println!("Prometheus zephon_operator_elements_out_total: {theirs:?}");
    assert_eq!(
        theirs,
        want,
        "Prometheus's series against the run's own snapshot; its targets: {}",
        get(&format!("{prom}/api/v1/targets")).unwrap_or_default()
    );
    let batches = query(&prom, "zephon_consumer_batches_total");
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(batches[0].1, 12.0);
}

#[test]
fn a_metrics_address_in_use_or_not_on_loopback_is_refused() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let recipe =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/recipes/fetch_batch.toml");
    for (flag, want) in [
        (format!("--metrics-addr={addr}"), "is in use".to_owned()),
        (
            "--metrics-addr=0.0.0.0:0".to_owned(),
            "not a loopback address".to_owned(),
        ),
        (
            "--metrics-addr=nowhere".to_owned(),
            "not a host:port address".to_owned(),
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
            .args(["run", "--max-batches", "1", &flag])
            .arg(&recipe)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}");
        assert!(
            stderr.contains("metrics_addr") && stderr.contains(&want),
            "{flag}: {stderr}"
        );
    }
}
