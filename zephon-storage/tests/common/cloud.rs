//! Cloud storage emulators on free ports of 127.0.0.1, killed on drop:
//! gcp-storage-emulator for Google Cloud Storage, Azurite for Azure Blob.

use super::{free_port, spawn, wait_for_port};
use std::future::IntoFuture;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use zephon_storage::StorageOptions;
use zephon_storage::backend::{Backend, runtime};

/// What the tests do with either emulator.
pub trait ObjectServer {
    /// The URI scheme the dataset is opened with.
    fn scheme(&self) -> &'static str;
    /// `base` pointed at this server, with what it takes to be let in.
    fn opts(&self, base: StorageOptions) -> StorageOptions;
    /// Creates `bucket` (a container) if missing and uploads every file of
    /// `dir` under `prefix`.
    fn upload(&self, bucket: &str, prefix: &str, dir: &Path);
    /// Whole-object downloads (status 200) of the object `key` of `bucket`.
    fn downloads(&self, bucket: &str, key: &str) -> usize;
    /// Reads of any kind (GET or HEAD, any status) whose path contains `needle`.
    fn reads(&self, needle: &str) -> usize;
    /// Kills the server.
    fn kill(&mut self);

    /// The URI of `prefix` in `bucket`.
    fn uri(&self, bucket: &str, prefix: &str) -> String {
        format!("{}://{bucket}/{prefix}", self.scheme())
    }
}

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The request line's path and status of an access-log line (both
/// emulators write `"GET /path HTTP/1.1" 200 ...`).
fn request(line: &str) -> Option<(&str, &str, &str)> {
    let (_, rest) = line.split_once('"')?;
    let (req, rest) = rest.split_once('"')?;
    let mut parts = req.split(' ');
    let (method, path) = (parts.next()?, parts.next()?);
    let status = rest.split_whitespace().next()?;
    Some((method, path, status))
}

fn count(log: &Path, f: impl Fn(&str, &str, &str) -> bool) -> usize {
    log_lines(log)
        .iter()
        .filter_map(|l| request(l))
        .filter(|(m, p, s)| f(m, p, s))
        .count()
}

/// Sends one HTTP/1.1 request and returns the status line.
fn http(port: u16, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{head}Host: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.lines().next().unwrap_or_default().to_owned()
}

/// Writes one object. gcp-storage-emulator answers `"contentType": null`
/// for an upload without one, which opendal cannot parse: so it gets one.
pub fn put(b: &Backend, name: &str, data: impl Into<bytes::Bytes>) {
    let put =
        b.op.write_with(name, data.into())
            .content_type("application/octet-stream");
    runtime::block_on(put.into_future())
        .unwrap_or_else(|e| panic!("uploading {name} to {}: {e}", b.uri));
}

fn upload_files(uri: &str, opts: &StorageOptions, dir: &Path) {
    let b = Backend::open("upload", uri, opts).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            put(&b, &name, std::fs::read(&p).unwrap());
        }
    }
}

/// A gcp-storage-emulator process, keeping objects in memory.
pub struct GcsEmulator {
    pub port: u16,
    pub log: PathBuf,
    child: Child,
}

impl GcsEmulator {
    pub fn start(dir: &Path) -> Self {
        let port = free_port();
        let log = dir.join(format!("gcs-{port}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut child = spawn(
            Command::new("gcp-storage-emulator")
                .args(["start", "--host", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .arg("--in-memory")
                .env("PYTHONUNBUFFERED", "1")
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(f),
            "gcp-storage-emulator",
            "pip install gcp-storage-emulator",
        );
        wait_for_port(port, "gcp-storage-emulator", &mut child);
        GcsEmulator { port, log, child }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl ObjectServer for GcsEmulator {
    fn scheme(&self) -> &'static str {
        "gs"
    }

    /// The emulator checks no credentials: requests go unsigned.
    fn opts(&self, base: StorageOptions) -> StorageOptions {
        base.endpoint(&self.endpoint()).anonymous(true)
    }

    fn upload(&self, bucket: &str, prefix: &str, dir: &Path) {
        let body = format!("{{\"name\":\"{bucket}\"}}");
        let status = http(
            self.port,
            "POST /storage/v1/b HTTP/1.1\r\nContent-Type: application/json\r\n",
            body.as_bytes(),
        );
        assert!(
            status.contains(" 200") || status.contains(" 409"),
            "bucket creation failed: {status}"
        );
        let opts = self.opts(StorageOptions::default());
        upload_files(&self.uri(bucket, prefix), &opts, dir);
    }

    /// Media downloads: `GET /storage/v1/b/B/o/KEY?alt=media`, the key's
    /// slashes escaped, with or without the version they are conditional
    /// on (`&ifGenerationMatch=N`).
    fn downloads(&self, bucket: &str, key: &str) -> usize {
        let want = format!(
            "/storage/v1/b/{bucket}/o/{}?alt=media",
            key.replace('/', "%2F")
        );
        count(&self.log, |m, p, s| {
            let conditional = p
                .strip_prefix(want.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("&ifGenerationMatch="));
            m == "GET" && conditional && s == "200"
        })
    }

    fn reads(&self, needle: &str) -> usize {
        count(&self.log, |m, p, _| {
            (m == "GET" || m == "HEAD") && p.contains(needle)
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GcsEmulator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Azurite's well-known development account.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// Its key, public by design (every Azurite has it).
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An Azurite blob server, keeping blobs in memory, telemetry off.
pub struct Azurite {
    pub port: u16,
    pub log: PathBuf,
    child: Child,
}

impl Azurite {
    pub fn start(dir: &Path) -> Self {
        let port = free_port();
        let log = dir.join(format!("azurite-{port}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let work = dir.join(format!("azurite-{port}"));
        std::fs::create_dir_all(&work).unwrap();
        let mut child = spawn(
            Command::new("azurite-blob")
                .args(["--blobHost", "127.0.0.1", "--blobPort"])
                .arg(port.to_string())
                .args([
                    "--inMemoryPersistence",
                    "--skipApiVersionCheck",
                    "--disableTelemetry",
                ])
                .current_dir(&work)
                .stdout(f)
                .stderr(Stdio::null()),
            "azurite-blob",
            "npm install -g azurite",
        );
        wait_for_port(port, "azurite-blob", &mut child);
        Azurite { port, log, child }
    }

    /// Path-style, as Azurite serves its account.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{AZURITE_ACCOUNT}", self.port)
    }

    /// Creates a container, readable without credentials if `public`:
    /// opendal writes blobs but creates no containers, so this request is
    /// signed here (Shared Key).
    pub fn create_container(&self, name: &str, public: bool) {
        let access = if public {
            "x-ms-blob-public-access:container\n"
        } else {
            ""
        };
        let date = http_date(std::time::SystemTime::now());
        let version = "2021-08-06";
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\n{access}x-ms-date:{date}\nx-ms-version:{version}\n\
             /{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
        );
        let sig = shared_key_signature(AZURITE_KEY, &to_sign);
        let status = http(
            self.port,
            &format!(
                "PUT /{AZURITE_ACCOUNT}/{name}?restype=container HTTP/1.1\r\n\
                 {}x-ms-date: {date}\r\nx-ms-version: {version}\r\n\
                 Authorization: SharedKey {AZURITE_ACCOUNT}:{sig}\r\n",
                access.replace(':', ": ").replace('\n', "\r\n")
            ),
            b"",
        );
        assert!(
            status.contains(" 201") || status.contains(" 409"),
            "container creation failed: {status}"
        );
    }
}

impl Azurite {
    /// An account SAS (blob service, read and list, until 2099) signed
    /// with `key`.
    pub fn account_sas(key: &str) -> String {
        let (version, expiry) = ("2021-08-06", "2099-01-01T00:00:00Z");
        let to_sign = format!("{AZURITE_ACCOUNT}\nrl\nb\nsco\n\n{expiry}\n\n\n{version}\n\n");
        let sig = shared_key_signature(key, &to_sign)
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        format!("sv={version}&ss=b&srt=sco&sp=rl&se={expiry}&sig={sig}")
    }
}

impl ObjectServer for Azurite {
    fn scheme(&self) -> &'static str {
        "azblob"
    }

    fn opts(&self, base: StorageOptions) -> StorageOptions {
        base.endpoint(&self.endpoint())
            .account_name(AZURITE_ACCOUNT)
            .account_key(AZURITE_KEY)
    }

    fn upload(&self, container: &str, prefix: &str, dir: &Path) {
        self.create_container(container, false);
        let opts = self.opts(StorageOptions::default());
        upload_files(&self.uri(container, prefix), &opts, dir);
    }

    fn downloads(&self, container: &str, key: &str) -> usize {
        let want = format!("/{AZURITE_ACCOUNT}/{container}/{key}");
        count(&self.log, |m, p, s| m == "GET" && p == want && s == "200")
    }

    fn reads(&self, needle: &str) -> usize {
        count(&self.log, |m, p, _| {
            (m == "GET" || m == "HEAD") && p.contains(needle)
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.kill();
    }
}

/// base64(HMAC-SHA256(base64-decoded key, text)).
fn shared_key_signature(key: &str, text: &str) -> String {
    use base64::Engine;
    use hmac::Mac;
    let engine = base64::engine::general_purpose::STANDARD;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&engine.decode(key).unwrap()).unwrap();
    mac.update(text.as_bytes());
    engine.encode(mac.finalize().into_bytes())
}

/// RFC 1123 date (`Mon, 30 Nov 2026 17:50:47 GMT`), as x-ms-date wants it.
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
