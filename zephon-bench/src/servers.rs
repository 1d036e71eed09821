//! The servers the remote benchmarks start on 127.0.0.1 (nginx for HTTP,
//! moto_server or s3s-fs for S3), killed on drop, and the CPU time they
//! spend.

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

/// User plus system CPU time of process `pid` and of its child processes
/// now alive (an nginx master's workers), as [`cpu_time`] gives each.
pub(super) fn tree_cpu_time(pid: u32) -> Option<Duration> {
    let own = cpu_time(pid)?;
    let children = children_of(pid).into_iter().filter_map(cpu_time);
    Some(children.fold(own, |a, b| a + b))
}

/// The processes whose parent is `pid` now, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

/// The parent of process `pid`, from `/proc/PID/stat` (its 4th field).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A server process of the benchmark, killed on drop with the processes
/// it started (an nginx master's workers). It stays in the benchmark's
/// process group, so an interrupt from the terminal ends it too.
pub(super) struct Server {
    child: Child,
    cores: usize,
}

impl Server {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The most cores the server works on at once: its CPU time spread
    /// over more would understate the wall time it takes. nginx runs a
    /// worker process per core; moto_server runs Python, one thread at a
    /// time; s3s-fs runs on a thread per core.
    pub(super) fn cores(&self) -> usize {
        self.cores
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Its children are found while it lives: killed alone, an nginx
        // master leaves its workers serving the port, and once it is gone
        // they are no longer its children. Killed first, it cannot start a
        // worker in place of one killed.
        let children = children_of(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        #[cfg(unix)]
        for pid in children {
            // SAFETY: kill(2) on a pid read from /proc a moment ago; at
            // worst the process has exited and the call fails.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
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

/// The `http`-block directives of the nginx the benchmarks start, where
/// none are given: files sent with `sendfile`, which nginx does for each
/// part of a multi-range answer on its own (a write per part).
pub(super) const NGINX_HTTP: &str = "sendfile on;";

/// Checks `--nginx-http`: directives of nginx's `http` block, each ending
/// with `;`, without blocks of their own (no braces), on one line.
pub(super) fn nginx_directives(v: &str) -> std::result::Result<String, String> {
    let v = v.trim();
    if v.is_empty() || !v.ends_with(';') {
        return Err(format!("`{v}`: nginx directives end with `;`"));
    }
    if let Some(c) = v
        .chars()
        .find(|c| matches!(c, '{' | '}' | '\n' | '\r' | '#'))
    {
        return Err(format!(
            "`{v}`: {c:?} is not allowed (directives of the `http` block only, on one line)"
        ));
    }
    Ok(v.to_owned())
}

/// nginx serving `root` (the dataset with its `index.json`) on a free port,
/// with `directives` in its `http` block (see [`NGINX_HTTP`]), its
/// configuration, pid and temporary files under `run`; `None` where nginx
/// is not installed.
pub(super) fn start_nginx(
    run: &Path,
    root: &Path,
    directives: &str,
) -> Result<Option<(Server, String)>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    // A worker per core, as nginx's own `auto` gives: one worker serves
    // its connections on one core, and a reader with many ranges in flight
    // waited on it while the other cores idled.
    let workers = zephon_core::runner::num_cpus();
    // A master started by root runs its workers as `nobody`, who may not
    // read the dataset's temporary folder: they run as the caller.
    #[cfg(unix)]
    // SAFETY: geteuid(2) reads the caller's id and cannot fail.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user root;\n"
    } else {
        ""
    };
    #[cfg(not(unix))]
    let user = "";
    std::fs::create_dir_all(run.join("tmp"))?;
    let t = run.join("tmp").display().to_string();
    let conf = run.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "{user}worker_processes {workers};\nerror_log {run}/error.log;\npid {run}/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  {directives}\n  client_body_temp_path {t};\n  proxy_temp_path {t};\n\
               fastcgi_temp_path {t};\n  uwsgi_temp_path {t};\n  scgi_temp_path {t};\n\
               server {{\n    listen 127.0.0.1:{port};\n    root {root};\n  }}\n}}\n",
            run = run.display(),
            root = root.display(),
        ),
    )?;
    // nginx reports a configuration it refuses on stderr, before it opens
    // the error log the configuration names.
    let stderr = run.join("stderr.log");
    let nginx = ["nginx", "/usr/sbin/nginx"].into_iter().find_map(|bin| {
        Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(run)
            // In the foreground, so the process started is the master,
            // whose workers' CPU time counts as the server's.
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).ok()?)
            .spawn()
            .ok()
    });
    let Some(mut child) = nginx else {
        return Ok(None);
    };
    // A directive nginx refuses ends it at once: say so with its own words,
    // rather than wait for a port that never opens.
    std::thread::sleep(Duration::from_millis(100));
    if let Some(status) = child.try_wait()? {
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        bail!(
            "nginx exited ({status}) with the http directives `{directives}`: {}",
            log.trim()
        );
    }
    let server = Server {
        child,
        cores: workers,
    };
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
    let moto = Server { child, cores: 1 };
    wait_listening(port, "moto_server")?;
    Ok((moto, format!("http://127.0.0.1:{port}")))
}

/// s3s-fs (the `s3s-fs` crate's server: `cargo install s3s-fs --features
/// binary`) keeping its buckets under `root`. Unlike moto_server, which
/// copies the whole object for every ranged GET, it reads a range from the
/// object's file, so a cold pass measures the reader rather than the
/// server. Objects are uploaded through it ([`upload`]), never placed in
/// `root` by hand: for a file it did not write it hashes the whole file on
/// every GET, for the ETag it did not store. It checks signatures (with
/// [`s3_opts`]' keys), so the bucket, a folder of `root`, is made here:
/// the endpoint and that bucket's name come back.
pub(super) fn start_s3s(root: &Path) -> Result<(Server, String, String)> {
    let bucket = bucket_name();
    std::fs::create_dir_all(root.join(&bucket))?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("s3s-fs")
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", "test", "--secret-key", "test"])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context(
            "cannot start s3s-fs (cargo install s3s-fs --features binary), or pass --endpoint",
        )?;
    let server = Server {
        child,
        cores: zephon_core::runner::num_cpus(),
    };
    wait_listening(port, "s3s-fs")?;
    Ok((server, format!("http://127.0.0.1:{port}"), bucket))
}

fn bucket_name() -> String {
    format!("zephon-bench-{}", std::process::id())
}

/// Creates this run's bucket at `endpoint` (a moto_server, which takes an
/// unsigned request) and uploads `dir`'s files into it ([`put_files`]).
pub(super) fn upload(endpoint: &str, dir: &Path) -> Result<String> {
    use std::io::{Read, Write};
    let bucket = bucket_name();
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
    put_files(endpoint, &bucket, dir)
}

/// Uploads `dir`'s files under `data/` of `bucket` at `endpoint`, signed
/// with [`s3_opts`]' keys; returns the dataset's URI.
pub(super) fn put_files(endpoint: &str, bucket: &str, dir: &Path) -> Result<String> {
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
