//! The servers the remote benchmarks start on 127.0.0.1 (nginx for HTTP,
//! moto_server for S3), killed on drop, and the CPU time they spend.

use anyhow::{Context, Result, bail};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zephon_storage::StorageOptions;
use zephon_storage::backend::{Backend, runtime};

/// User plus system CPU time of process `pid` (all its threads), from
/// `/proc/PID/stat` in clock ticks of 1/100 s (Linux's fixed USER_HZ).
pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// A server process of the benchmark, killed on drop.
pub(super) struct Server(Child);

impl Server {
    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_listening(port: u16, what: &str) -> Result<()> {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(20) {
            bail!("{what} did not listen on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// nginx serving `root` (the dataset with its `index.json`) on a free port,
/// its configuration, pid and temporary files under `run`; `None` where
/// nginx is not installed.
pub(super) fn start_nginx(run: &Path, root: &Path) -> Result<Option<(Server, String)>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    std::fs::create_dir_all(run.join("tmp"))?;
    let t = run.join("tmp").display().to_string();
    let conf = run.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\nerror_log {run}/error.log;\npid {run}/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  client_body_temp_path {t};\n  proxy_temp_path {t};\n\
               fastcgi_temp_path {t};\n  uwsgi_temp_path {t};\n  scgi_temp_path {t};\n\
               server {{\n    listen 127.0.0.1:{port};\n    root {root};\n  }}\n}}\n",
            run = run.display(),
            root = root.display(),
        ),
    )?;
    let nginx = ["nginx", "/usr/sbin/nginx"].into_iter().find_map(|bin| {
        Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(run)
            // One process, so its CPU time is the server's.
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    });
    let Some(child) = nginx else {
        return Ok(None);
    };
    let server = Server(child);
    wait_listening(port, "nginx")?;
    Ok(Some((server, format!("http://127.0.0.1:{port}/"))))
}

pub(super) fn start_moto() -> Result<(Server, String)> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start moto_server (pip install 'moto[server]'), or pass --endpoint")?;
    let moto = Server(child);
    wait_listening(port, "moto_server")?;
    Ok((moto, format!("http://127.0.0.1:{port}")))
}

pub(super) fn upload(endpoint: &str, dir: &Path) -> Result<String> {
    use std::io::{Read, Write};
    let bucket = format!("zephon-bench-{}", std::process::id());
    let hostport = endpoint.trim_start_matches("http://");
    let put = || -> std::io::Result<String> {
        let mut s = TcpStream::connect(hostport)?;
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        Ok(resp)
    };
    // A server just started has reset this first request's connection on
    // a busy machine: tried again (creating a bucket one owns succeeds).
    let mut resp = put();
    for _ in 0..20 {
        if resp.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        resp = put();
    }
    let resp = resp.with_context(|| format!("creating bucket {bucket} at {endpoint}"))?;
    if !resp.starts_with("HTTP/1.1 200") {
        bail!(
            "creating bucket {bucket} at {endpoint}: {}",
            resp.lines().next().unwrap_or("no answer")
        );
    }
    let uri = format!("s3://{bucket}/data");
    let b = Backend::open("bench", &uri, &s3_opts(endpoint))?;
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let name = p
            .file_name()
            .context("file name")?
            .to_string_lossy()
            .to_string();
        runtime::block_on(b.op.write(&name, std::fs::read(&p)?))?;
    }
    Ok(uri)
}

pub(super) fn s3_opts(endpoint: &str) -> StorageOptions {
    let mut o = StorageOptions::default()
        .endpoint(endpoint)
        .region("us-east-1");
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        o = o.access_key_id("test").secret_access_key("test");
    }
    o
}
