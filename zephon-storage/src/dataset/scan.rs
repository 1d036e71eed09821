//! Scanning a dataset's shards: listing, downloading, counting and hashing.
//! Used to open datasets without a manifest and to write one
//! ([`build_index`]).

use crate::error::shard_error;
use crate::format::compression::Compression;
use crate::format::detect::{Detected, DetectedShard};
use crate::format::jsonl::{LineIndex, parse_line};
use crate::format::tokens::{FlatTokens, MegatronIndex};
use crate::format::{FormatOptions, FormatSpec, ShardIndex, detect, open_index};
use crate::manifest::{
    CHUNK_BYTES, ChunkSums, MANIFEST, Manifest, ShardEntry, encode_index, index_path,
};
use crate::metrics::CacheMetrics;
use crate::root::check_relative;
use crate::source::backend::{Backend, runtime};
use crate::source::download::{download_hashed, download_to_temp};
use futures::TryStreamExt;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use zephon_core::runner::offload;
use zephon_core::{Error, Result};

/// Most entries a remote listing is read to: past it, a dataset is opened
/// from its `index.json` (16,777,216 objects; a listing's entries are held
/// in memory while it is read, about 100 bytes each).
pub const MAX_LISTED: usize = 1 << 24;

/// Lists every file under the dataset root (recursively), sorted by path,
/// with their stored sizes. A local root is walked by [`list_local`], so
/// every command finds the same shards in a folder.
pub async fn list_files(backend: &Backend, dataset: &str) -> Result<Vec<(String, u64)>> {
    let info = backend.op.info();
    if info.scheme() == "fs" {
        let (root, name) = (PathBuf::from(info.root()), dataset.to_owned());
        return offload("list", move || list_local(&name, &root)).await?;
    }
    // On a task of its own: the client's code that turns a server's keys
    // into paths panics on a key outside the prefix listed, and a panic
    // there must be an error naming the listing, not the caller's end.
    let (b, name) = (backend.clone(), dataset.to_owned());
    runtime::spawn(
        format!("listing {} (dataset `{dataset}`)", backend.uri),
        async move { list_remote(&b, &name).await },
    )
    .await
}

/// [`list_files`] of a remote root.
async fn list_remote(backend: &Backend, dataset: &str) -> Result<Vec<(String, u64)>> {
    let err =
        |e: opendal::Error| shard_error(dataset, &backend.uri, format!("cannot list shards: {e}"));
    let mut lister = backend
        .op
        .lister_with("")
        .recursive(true)
        .await
        .map_err(err)?;
    // A listing is the server's answer, read page after page for as long
    // as the server says there is more: a name it gives twice (a page
    // repeated, or a continuation that leads back) would be a shard read
    // twice, or a listing without end.
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while let Some(e) = lister.try_next().await.map_err(err)? {
        let path = e.path().trim_start_matches('/').to_owned();
        if seen.len() >= MAX_LISTED {
            return Err(shard_error(
                dataset,
                &backend.uri,
                format!(
                    "the listing goes past {MAX_LISTED} objects; write an index.json \
                     (`zephon build-index` where the files are) to open the dataset without listing"
                ),
            ));
        }
        if !seen.insert(path.clone()) {
            return Err(shard_error(
                dataset,
                &backend.uri_of(&path),
                "the server's listing names this object twice (a page repeated, or a \
                 continuation leading back): its listing cannot be trusted; write an index.json \
                 to open the dataset without listing",
            ));
        }
        if !e.metadata().is_file() {
            continue;
        }
        let len = match e.metadata().content_length() {
            0 => backend.op.stat(&path).await.map_err(err)?.content_length(),
            n => n,
        };
        out.push((path, len));
    }
    out.sort();
    Ok(out)
}

/// Lists every file under the local folder `dir`, recursively, sorted by
/// path (relative, `/`-separated), with their sizes: the one discovery rule
/// of local datasets, whatever command opens them.
///
/// Symbolic links are followed, to files and to folders. A link that leads
/// back to a folder above it (a loop), a folder or file reached twice
/// (its samples would be read twice), a broken link and a name that is not
/// UTF-8 are errors naming the path. Entries that are neither files nor
/// folders (sockets, FIFOs) are not shards and are passed over.
///
/// ```
/// use zephon_storage::scan::list_local;
/// let dir = std::env::temp_dir().join(format!("zephon-list-doc-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("sub")).unwrap();
/// std::fs::write(dir.join("a.jsonl"), "{}\n").unwrap();
/// std::fs::write(dir.join("sub/b.jsonl"), "{}\n{}\n").unwrap();
/// std::os::unix::fs::symlink(&dir, dir.join("sub/up")).unwrap();
/// let err = list_local("doc", &dir).unwrap_err().to_string();
/// assert!(err.contains("sub/up") && err.contains("loop"), "{err}");
/// std::fs::remove_file(dir.join("sub/up")).unwrap();
/// let files = list_local("doc", &dir).unwrap();
/// assert_eq!(files, vec![("a.jsonl".to_string(), 3), ("sub/b.jsonl".to_string(), 6)]);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn list_local(dataset: &str, dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut walk = LocalWalk {
        dataset,
        files: Vec::new(),
        ancestors: Vec::new(),
        seen: HashMap::new(),
    };
    walk.folder(dir, "")?;
    walk.files.sort();
    Ok(walk.files)
}

/// State of one [`list_local`] walk.
struct LocalWalk<'a> {
    /// Named in errors.
    dataset: &'a str,
    files: Vec<(String, u64)>,
    /// Device and inode of the folders on the path being walked.
    ancestors: Vec<(u64, u64)>,
    /// Every folder and file met so far, by device and inode, with the
    /// path it was first met at.
    seen: HashMap<(u64, u64), PathBuf>,
}

impl LocalWalk<'_> {
    fn error(&self, path: &Path, message: impl Into<String>) -> Error {
        shard_error(self.dataset, &path.display().to_string(), message)
    }

    /// Records `path` (with metadata `m`) as met; meeting it again is an error.
    fn first_visit(&mut self, path: &Path, m: &std::fs::Metadata) -> Result<()> {
        let id = (m.dev(), m.ino());
        if self.ancestors.contains(&id) {
            return Err(self.error(
                path,
                "symlink loop: this link leads back to a folder above it",
            ));
        }
        if let Some(first) = self.seen.insert(id, path.to_owned()) {
            return Err(self.error(
                path,
                format!(
                    "the same {} as `{}` (through a symlink): its samples would be read twice",
                    if m.is_dir() { "folder" } else { "file" },
                    first.display()
                ),
            ));
        }
        Ok(())
    }

    fn folder(&mut self, dir: &Path, prefix: &str) -> Result<()> {
        let dataset = self.dataset;
        let cannot = |e: std::io::Error| {
            shard_error(
                dataset,
                &dir.display().to_string(),
                format!("cannot read folder: {e}"),
            )
        };
        let m = std::fs::metadata(dir).map_err(cannot)?;
        if prefix.is_empty() {
            self.first_visit(dir, &m)?;
        }
        self.ancestors.push((m.dev(), m.ino()));
        for entry in std::fs::read_dir(dir).map_err(cannot)? {
            let entry = entry.map_err(cannot)?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(self.error(&path, "the file name is not UTF-8"));
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            // `metadata` follows symlinks: a link is what it points at.
            let m = std::fs::metadata(&path).map_err(|e| {
                let link = entry.file_type().is_ok_and(|t| t.is_symlink());
                self.error(
                    &path,
                    if link {
                        format!("broken symlink: {e}")
                    } else {
                        format!("cannot read: {e}")
                    },
                )
            })?;
            if m.is_dir() {
                self.first_visit(&path, &m)?;
                self.folder(&path, &rel)?;
            } else if m.is_file() {
                self.first_visit(&path, &m)?;
                self.files.push((rel, m.len()));
            }
        }
        self.ancestors.pop();
        Ok(())
    }
}

/// Lists the dataset's files and tells its format from their names (see
/// [`detect()`]); no shards, or several formats, is an error listing what
/// was found. A listed shard or sidecar whose
/// key is not a plain relative path under the root (no `..`, absolute
/// path, URI, empty or padded name) is an error
/// naming it: opening it could read another object than the one listed.
pub async fn detect_remote(
    backend: &Backend,
    dataset: &str,
    opts: &FormatOptions,
) -> Result<Detected> {
    let files: Vec<(String, u64)> = list_files(backend, dataset)
        .await?
        .into_iter()
        .filter(|(p, _)| p != MANIFEST)
        .collect();
    let found = detect(&files, opts).map_err(|m| shard_error(dataset, &backend.uri, m))?;
    for s in &found.shards {
        let side = s.sidecar.iter().map(|(p, _)| p.as_str());
        for path in std::iter::once(s.path.as_str()).chain(side) {
            check_relative(path).map_err(|m| {
                shard_error(
                    dataset,
                    &backend.uri,
                    format!("listed object {path:?}: {m}"),
                )
            })?;
        }
    }
    Ok(found)
}

/// Lists the JSONL shard files under the dataset root (recursively), sorted
/// by path, with their stored sizes.
pub async fn list_shards(backend: &Backend, dataset: &str) -> Result<Vec<(String, u64)>> {
    let d = detect_remote(backend, dataset, &FormatOptions::default()).await?;
    if !d.format.is_jsonl() {
        return Err(shard_error(
            dataset,
            &backend.uri,
            format!("the shards are {}, not JSONL", d.format.name()),
        ));
    }
    Ok(d.shards.into_iter().map(|s| (s.path, s.bytes)).collect())
}

/// Describes one shard of a non-JSONL format: reads as little as the
/// format allows (nothing for flat token files, the `.idx` for Megatron,
/// the whole shard otherwise).
async fn scan_format_shard(
    backend: &Backend,
    dataset: &str,
    format: &FormatSpec,
    shard: &DetectedShard,
    metrics: &CacheMetrics,
    checksums: Checksums,
) -> Result<ShardEntry> {
    let uri = backend.uri_of(&shard.path);
    let mut entry = ShardEntry::new(&shard.path, 0, shard.bytes);
    let bad = |m: String| shard_error(dataset, &uri, m);
    entry.samples = match format {
        FormatSpec::Tokens { dtype, seq_len } => {
            FlatTokens::from_size(shard.bytes, *dtype, *seq_len)
                .map_err(bad)?
                .len()
        }
        FormatSpec::Megatron => {
            let (idx, listed) = shard.sidecar.clone().ok_or_else(|| bad("no .idx".into()))?;
            // An `.idx` takes 12 bytes a sequence (GBs for a large corpus):
            // counted from a map (of the file itself where it is local, of
            // a temporary file otherwise), not read into memory, and no
            // more of it than the listing gives.
            let got = download_to_temp(backend, dataset, &idx, Some(listed), false).await?;
            if got.len != listed {
                return Err(shard_error(
                    dataset,
                    &backend.uri_of(&idx),
                    format!("the listing gives {listed} bytes but {} came", got.len),
                ));
            }
            entry.index = Some(idx);
            MegatronIndex::open(got.bytes, shard.bytes)
                .map_err(bad)?
                .len()
        }
        _ => {
            let (data, sha256) = download_hashed(backend, dataset, &entry, metrics).await?;
            entry.sha256 = Some(sha256);
            if Compression::from_path(&shard.path) != Compression::None {
                entry.uncompressed_bytes = Some(data.len() as u64);
            } else {
                entry.chunks = Some(ChunkSums::of(&data, CHUNK_BYTES));
            }
            open_index(format, &data, None).map_err(bad)?.len()
        }
    };
    if checksums == Checksums::Always && entry.sha256.is_none() {
        let (data, sha256) = download_hashed(backend, dataset, &entry, metrics).await?;
        entry.sha256 = Some(sha256);
        entry.chunks = Some(ChunkSums::of(&data, CHUNK_BYTES));
    }
    Ok(entry)
}

/// Downloads one shard and describes it: samples, sizes, checksum, index.
pub async fn scan_shard(
    backend: &Backend,
    dataset: &str,
    path: &str,
    bytes: u64,
    metrics: &CacheMetrics,
) -> Result<(ShardEntry, LineIndex)> {
    scan_jsonl(backend, dataset, path, bytes, metrics, false).await
}

/// [`scan_shard`], optionally checking every line is a JSON object (what
/// `build_index` vouches for; opening a dataset leaves that to the reads).
async fn scan_jsonl(
    backend: &Backend,
    dataset: &str,
    path: &str,
    bytes: u64,
    metrics: &CacheMetrics,
    parse: bool,
) -> Result<(ShardEntry, LineIndex)> {
    let probe = ShardEntry::new(path, 0, bytes);
    // The checksum covers the stored object: the compressed bytes of a
    // compressed shard, hashed as they download.
    let (data, raw_sha) = download_hashed(backend, dataset, &probe, metrics).await?;
    let index = LineIndex::build(&data).map_err(|e| e.in_shard(dataset, &backend.uri_of(path)))?;
    if parse {
        check_json_lines(&data, dataset, &backend.uri_of(path))?;
    }
    let compressed = Compression::from_path(path) != Compression::None;
    let entry = ShardEntry {
        path: path.to_owned(),
        samples: index.len(),
        bytes,
        uncompressed_bytes: compressed.then_some(data.len() as u64),
        sha256: Some(raw_sha),
        index: (!compressed).then(|| index_path(path)),
        // A compressed shard is downloaded whole and checked by its SHA-256:
        // it is never read by blocks.
        chunks: (!compressed).then(|| ChunkSums::of(&data, CHUNK_BYTES)),
    };
    Ok((entry, index))
}

/// Checks that every line of a JSONL shard is a JSON object, so a manifest
/// never vouches for a file that is not JSON lines; the error names the
/// shard and the line. Records are parsed one at a time and dropped.
fn check_json_lines(data: &[u8], dataset: &str, uri: &str) -> Result<()> {
    let mut start = 0;
    for (line, end) in (1..).zip(memchr::memchr_iter(b'\n', data).chain([data.len()])) {
        if end == data.len() && start == data.len() {
            break;
        }
        parse_line(&data[start..end], dataset, uri, line)?;
        start = end + 1;
    }
    Ok(())
}

/// Describes every listed shard (downloading what counting needs), in path order.
pub async fn scan(
    backend: &Backend,
    dataset: &str,
    metrics: &CacheMetrics,
    opts: &FormatOptions,
) -> Result<Manifest> {
    let found = detect_remote(backend, dataset, opts).await?;
    let mut shards = Vec::new();
    for s in &found.shards {
        if found.format.is_jsonl() {
            let (mut entry, _) = scan_shard(backend, dataset, &s.path, s.bytes, metrics).await?;
            // No sidecar was written: do not claim one.
            entry.index = None;
            shards.push(entry);
        } else {
            let checksums = Checksums::WhereRead;
            let entry = scan_format_shard(backend, dataset, &found.format, s, metrics, checksums);
            shards.push(entry.await?);
        }
    }
    let mut m = Manifest::new(shards);
    m.format = found.format;
    Ok(m)
}

/// Writes `index.json` and a line-offset index sidecar per uncompressed
/// JSONL shard at the dataset root, and returns the manifest. Flat token
/// files are cut with the default [`FormatOptions`]; see [`build_index_with`].
pub async fn build_index(backend: &Backend, dataset: &str) -> Result<Manifest> {
    build_index_with(backend, dataset, &FormatOptions::default()).await
}

/// Like [`build_index`], with format options (recorded in the manifest).
/// An MDS dataset already has its index (Streaming's `index.json`) and is
/// left alone: that is an error, not an overwrite. A local dataset is
/// written inside its folder only (see [`list_local`] for the links a
/// listing follows): a shard in a linked folder outside it gets no
/// sidecar, and a symbolic link where a file would be written is an error.
pub async fn build_index_with(
    backend: &Backend,
    dataset: &str,
    opts: &FormatOptions,
) -> Result<Manifest> {
    build_index_checked(backend, dataset, opts, Checksums::WhereRead).await
}

/// What [`build_index_checked`] reads to record checksums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// The SHA-256 and [`ChunkSums`] of the shards it reads anyway (every
    /// format but flat token files and Megatron `.bin`s, which are counted
    /// from their size and `.idx`).
    #[default]
    WhereRead,
    /// Every shard's, reading those too (`zephon build-index --checksums`),
    /// so every block of every remote read is verified.
    Always,
}

/// [`build_index_with`], recording the checksums `checksums` asks for.
///
/// ```
/// use zephon_storage::backend::runtime;
/// use zephon_storage::scan::{Checksums, build_index_checked};
/// use zephon_storage::{Backend, FormatOptions};
/// # runtime::block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("0.bin"), vec![0u8; 64]).unwrap();
/// let backend = Backend::open("d", &dir.path().display().to_string(), &Default::default())?;
/// let opts = FormatOptions::default();
/// let m = build_index_checked(&backend, "d", &opts, Checksums::Always).await?;
/// assert!(m.shards[0].sha256.is_some() && m.shards[0].chunks.is_some());
/// # Ok::<_, zephon_core::Error>(())
/// # }).unwrap();
/// ```
pub async fn build_index_checked(
    backend: &Backend,
    dataset: &str,
    opts: &FormatOptions,
    checksums: Checksums,
) -> Result<Manifest> {
    if !backend.can_list {
        return Err(shard_error(
            dataset,
            &backend.uri,
            "this backend cannot list its shards; build the index where the files are (local or S3)",
        ));
    }
    // A Streaming index is left alone even when it is refused (a bad
    // basename): overwriting it would lose the dataset's own description.
    if let Ok(Some(existing)) = backend.read_manifest().await
        && !matches!(crate::manifest::manifest_from_index(&existing), Ok(None))
    {
        return Err(shard_error(
            dataset,
            &backend.uri_of(MANIFEST),
            "this is a MosaicML Streaming (MDS) index; Zephon reads it as it is",
        ));
    }
    let metrics = CacheMetrics::default();
    let found = detect_remote(backend, dataset, opts).await?;
    let mut shards = Vec::new();
    for s in &found.shards {
        if found.format.is_jsonl() {
            let (mut entry, index) =
                scan_jsonl(backend, dataset, &s.path, s.bytes, &metrics, true).await?;
            if let Some(idx) = entry.index.clone() {
                match writable(backend, dataset, &idx)? {
                    true => write(backend, dataset, &idx, encode_index(&index)).await?,
                    // Its line index is built when the shard is opened.
                    false => entry.index = None,
                }
            }
            shards.push(entry);
        } else {
            let entry = scan_format_shard(backend, dataset, &found.format, s, &metrics, checksums);
            shards.push(entry.await?);
        }
    }
    let mut manifest = Manifest::new(shards);
    manifest.format = found.format;
    writable(backend, dataset, MANIFEST)?;
    write(backend, dataset, MANIFEST, manifest.to_json().into_bytes()).await?;
    Ok(manifest)
}

/// Whether `path` of a local dataset may be written: not where a symbolic
/// link stands (an error: writing would truncate whatever it leads to),
/// and `false` in a folder that lies outside the dataset's folder (reached
/// through a linked folder, which the listing follows): `build-index`
/// writes inside the folder it is given, nowhere else. Any other backend's
/// paths stay under its root by construction.
fn writable(backend: &Backend, dataset: &str, path: &str) -> Result<bool> {
    let info = backend.op.info();
    if info.scheme() != "fs" {
        return Ok(true);
    }
    let root = PathBuf::from(info.root());
    let target = root.join(path);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(shard_error(
            dataset,
            &target.display().to_string(),
            "is a symbolic link: build-index does not write through one (it would overwrite \
             what the link leads to); remove it and run build-index again",
        ));
    }
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    Ok(match (target.parent().and_then(real), real(&root)) {
        (Some(folder), Some(root)) => folder.starts_with(root),
        _ => false,
    })
}

async fn write(backend: &Backend, dataset: &str, path: &str, data: Vec<u8>) -> Result<()> {
    backend
        .op
        .write(path, data)
        .await
        .map(|_| ())
        .map_err(|e| Error::Dataset {
            dataset: dataset.to_owned(),
            location: backend.uri_of(path),
            message: format!("cannot write: {e}"),
        })
}
