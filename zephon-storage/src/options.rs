//! Options for opening remote datasets: where the bytes are, how patient to be
//! with the server, and the shard cache.

use crate::format::FormatOptions;
use std::path::PathBuf;
use std::time::Duration;

/// How a dataset is opened by [`from_uri_with`](crate::UriDatasetExt::from_uri_with).
///
/// Unset S3 fields fall back to the usual AWS environment variables
/// (`AWS_ENDPOINT_URL`, `AWS_REGION` / `AWS_DEFAULT_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`);
/// Google Cloud Storage reads `STORAGE_EMULATOR_HOST` and
/// `GOOGLE_APPLICATION_CREDENTIALS`; unset Azure fields fall back to
/// `AZURE_STORAGE_CONNECTION_STRING`, or `AZURE_STORAGE_ACCOUNT`,
/// `AZURE_STORAGE_KEY` and `AZURE_STORAGE_SAS_TOKEN`.
///
/// ```
/// use std::time::Duration;
/// use zephon_storage::StorageOptions;
/// let opts = StorageOptions::default()
///     .endpoint("http://127.0.0.1:9000")
///     .region("us-east-1")
///     .io_timeout(Duration::from_secs(5))
///     .byte_range(true);
/// assert!(opts.byte_range);
/// ```
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// Endpoint of the S3 service (an S3-compatible server), of Google Cloud
    /// Storage or Azure Blob Storage (an emulator, e.g.
    /// `http://127.0.0.1:10000/devstoreaccount1` for Azurite), or of Hugging
    /// Face (a mirror); `None` means the default or the environment
    /// (`AWS_ENDPOINT_URL`, `STORAGE_EMULATOR_HOST`, the Azure connection
    /// string, `HF_ENDPOINT`).
    pub endpoint: Option<String>,
    /// S3 region.
    pub region: Option<String>,
    /// S3 access key id.
    pub access_key_id: Option<String>,
    /// S3 secret access key.
    pub secret_access_key: Option<String>,
    /// S3 session token.
    pub session_token: Option<String>,
    /// Azure storage account name.
    pub account_name: Option<String>,
    /// Azure storage account key (base64, as the portal shows it).
    pub account_key: Option<String>,
    /// Azure shared access signature, the query string without its `?`.
    pub sas_token: Option<String>,
    /// Send unsigned requests, loading no credentials: public S3 and GCS
    /// buckets, public Azure containers, emulators that check nothing.
    pub anonymous: bool,
    /// Limit for control requests (stat, list), in [`TIMEOUT_MS`] (1 ms to
    /// a day; default 30 s).
    pub timeout: Duration,
    /// Limit for each read of a body, in [`TIMEOUT_MS`] (1 ms to a day;
    /// default 10 s): a server that stops sending for this long fails the
    /// attempt (which is then retried).
    pub io_timeout: Duration,
    /// Slowest response body accepted, in bytes a second, in [`MIN_RATE`]
    /// (0, off, to 1 GiB/s; default 1 KiB/s): each `io_timeout` spent
    /// waiting on a body must bring this many bytes a second, or the read
    /// fails, naming the rate (not retried: a retry of a read that made
    /// progress starts a fresh count, so a drip would be retried without
    /// end). `io_timeout` alone bounds each wait for the next chunk, so a
    /// server dripping a body a byte at a time would hold a read for hours.
    /// Only time spent waiting on the server counts, and not the wait for
    /// the first chunk.
    pub min_rate: u64,
    /// Longest time one block of the shard cache, one byte-range request
    /// or one sidecar read may take, retries and their delays included, in
    /// [`BLOCK_DEADLINE_MS`] (100 ms to a day; default 120 s). Progress does
    /// not reset it: `io_timeout` and `min_rate` bound each wait and each
    /// window of a body, and a retry starts both afresh, so a server that
    /// sends a little and then stalls, again and again, would otherwise
    /// hold a read without end. A whole-shard download (a compressed shard,
    /// or any shard with the cache off) gets this much for every
    /// [`DEADLINE_SPAN`] bytes of it. Past it the read fails, naming the
    /// shard and this setting.
    pub block_deadline: Duration,
    /// Retries of a failed request before giving up, in [`RETRIES`] (0 to
    /// 100; default 3), with the same delays on every backend and mode
    /// (whole shards, blocks, byte ranges). They cover what the store may
    /// mend on another try: a connection refused or reset, a timeout
    /// (`timeout`, `io_timeout`), a status 429, 500, 502, 503 or 504, a
    /// body cut short, a `206` of fewer bytes than asked, or one whose
    /// `Content-Range` is not the range asked, a broken multipart answer
    /// (a part cut short or not asked for), and a block whose bytes differ
    /// from the manifest's per-chunk sums. Not retried: a body slower than
    /// `min_rate`, an object that changed during the run, a missing object
    /// or a refused credential. Once the retries are spent, the read is an
    /// error naming the shard and the range.
    ///
    /// What the defaults cover: 3 retries after delays of 100, 200 and
    /// 400 ms (doubling from `retry_min_delay`, each lengthened by a random
    /// jitter of up to itself) wait 700 ms in all, 1.4 s at most, so an
    /// endpoint that refuses connections for longer than that fails the
    /// read; one that hangs is waited for up to `io_timeout` a try, about
    /// 41 s over the four tries, within `block_deadline`. For a longer
    /// outage raise `retries` (10 wait 26.3 s, at most 52.6 s with the
    /// jitter) and `block_deadline` with it. `zephon run` sets it from a
    /// recipe's `[storage] retries` or `--retries`.
    pub retries: usize,
    /// First retry delay, in [`RETRY_DELAY_MS`] (0 to an hour; default
    /// 100 ms); later delays double, up to `retry_max_delay`, with jitter.
    pub retry_min_delay: Duration,
    /// Largest retry delay, in [`RETRY_DELAY_MS`] and at least
    /// `retry_min_delay` (default 5 s).
    pub retry_max_delay: Duration,
    /// Most requests in flight to the backend at once, in
    /// [`CONCURRENCY`] (1 to 4,096).
    pub concurrency: usize,
    /// Read uncompressed, indexed shards by byte range instead of downloading
    /// whole shards.
    pub byte_range: bool,
    /// Byte-range requests one read keeps in flight, in [`RANGE_CONCURRENCY`]
    /// (1 to 1,024; default 32, sized for object stores whose first byte
    /// takes tens of milliseconds). Reads in flight at once (fetch's
    /// parallelism) each keep this many, all within `concurrency`.
    pub range_concurrency: usize,
    /// Largest gap, in bytes, between two wanted samples of one shard that a
    /// single byte-range request spans, in [`RANGE_GAP`] (0 to 16 MiB;
    /// default 256 KiB): neighbours closer than this are fetched by one
    /// request and split, the gap's bytes read and dropped. 0 merges only
    /// adjacent samples. A merged request grows to [`RANGE_SPAN`] at most.
    /// This is the gap of requests that carry one range each (object
    /// stores, `range_parts` 1, a server without multi-range answers);
    /// multi-range HTTP requests use `range_part_gap`.
    pub range_gap: u64,
    /// Largest gap, in bytes, that one span of a multi-range HTTP request
    /// covers, in [`RANGE_GAP`] (0 to 16 MiB; default 4 KiB). There a
    /// further span costs a part header of about 100 bytes in the same
    /// request, not a request of its own, so merging across a wide gap
    /// only downloads bytes to drop: in a global shuffle of 4 KB windows
    /// of a 200 MB file, `range_gap`'s 256 KiB merged windows about 3 MB
    /// apart on average, downloading more gap than window (`zephon-bench
    /// tokens --serve http --range-part-gap BYTES` compares settings).
    pub range_part_gap: u64,
    /// Most spans (runs of wanted samples, planned with `range_part_gap`) one
    /// HTTP request asks for, in [`RANGE_PARTS`] (1 to 4,096; default 256):
    /// the server answers them in one `multipart/byteranges` body, so the
    /// cost of a request is shared by all of them. A request also stays
    /// within [`RANGE_SPAN`] bytes and a 4 KiB `Range` header. 1 sends one
    /// request per span. Plain HTTP(S) only: object stores (S3, GCS, Azure)
    /// answer one range per request. A server that ignores multi-range
    /// requests is detected and read one span at a time.
    pub range_parts: usize,
    /// Largest `index.json` read, in bytes, in [`MANIFEST_BYTES`] (1 KiB to
    /// 16 GiB; default [`MANIFEST_LIMIT`], 256 MiB, a manifest of about a
    /// million shards), remote or local. A manifest is read whole into
    /// memory before it is parsed: a longer answer or file (a wrong object,
    /// a broken or hostile server) is an error that names it, read no
    /// further than this.
    pub manifest_limit: u64,
    /// The shard cache.
    pub cache: CacheOptions,
    /// What file names cannot tell about a format (flat token files'
    /// `seq_len` and dtype, Parquet columns); used when there is no manifest.
    pub format: FormatOptions,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            account_name: None,
            account_key: None,
            sas_token: None,
            anonymous: false,
            timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(10),
            min_rate: 1024,
            block_deadline: Duration::from_secs(120),
            retries: 3,
            retry_min_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(5),
            concurrency: 64,
            byte_range: false,
            range_concurrency: 32,
            range_gap: 256 << 10,
            range_part_gap: 4 << 10,
            range_parts: 256,
            manifest_limit: MANIFEST_LIMIT,
            cache: CacheOptions::default(),
            format: FormatOptions::default(),
        }
    }
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident : $ty:ty => $field:ident $(($wrap:path))?;)*) => {
        impl StorageOptions {
            $(
                $(#[$m])*
                pub fn $name(mut self, v: $ty) -> Self {
                    self.$field = setters!(@wrap v $(, $wrap)?);
                    self
                }
            )*
        }
    };
    (@wrap $v:ident) => { $v };
    (@wrap $v:ident, $wrap:path) => { $wrap($v.into()) };
}

setters! {
    /// Sets the endpoint (S3, GCS, Azure Blob, Hugging Face mirror).
    endpoint: &str => endpoint (Some);
    /// Sets the S3 region.
    region: &str => region (Some);
    /// Sets the S3 access key id.
    access_key_id: &str => access_key_id (Some);
    /// Sets the S3 secret access key.
    secret_access_key: &str => secret_access_key (Some);
    /// Sets the Azure storage account name.
    account_name: &str => account_name (Some);
    /// Sets the Azure storage account key.
    account_key: &str => account_key (Some);
    /// Sets the Azure shared access signature.
    sas_token: &str => sas_token (Some);
    /// Turns unsigned (anonymous) requests on or off.
    anonymous: bool => anonymous;
    /// Sets the control-request timeout.
    timeout: Duration => timeout;
    /// Sets the per-read timeout.
    io_timeout: Duration => io_timeout;
    /// Sets the slowest response body accepted, in bytes a second.
    min_rate: u64 => min_rate;
    /// Sets the longest time one block or request may take, retries included.
    block_deadline: Duration => block_deadline;
    /// Sets the number of retries.
    retries: usize => retries;
    /// Sets the first retry delay.
    retry_min_delay: Duration => retry_min_delay;
    /// Sets the largest retry delay.
    retry_max_delay: Duration => retry_max_delay;
    /// Sets the most requests in flight.
    concurrency: usize => concurrency;
    /// Turns byte-range reads on or off.
    byte_range: bool => byte_range;
    /// Sets the byte-range requests one read keeps in flight.
    range_concurrency: usize => range_concurrency;
    /// Sets the largest gap one byte-range request spans.
    range_gap: u64 => range_gap;
    /// Sets the largest gap one span of a multi-range HTTP request covers.
    range_part_gap: u64 => range_part_gap;
    /// Sets the most spans one HTTP byte-range request asks for.
    range_parts: usize => range_parts;
    /// Sets the largest `index.json` read.
    manifest_limit: u64 => manifest_limit;
    /// Sets the shard cache options.
    cache: CacheOptions => cache;
    /// Sets the format options.
    format: FormatOptions => format;
}

/// Allowed values of [`StorageOptions::min_rate`]: 0 (off) to 1 GiB/s.
pub const MIN_RATE: zephon_core::settings::Range = zephon_core::settings::Range::new(
    0,
    1 << 30,
    "bytes a second each io_timeout of waiting on a body must bring",
);

/// The default [`StorageOptions::manifest_limit`], 256 MiB (a manifest of
/// about a million shards); also the limit of a local folder's manifest
/// opened with [`DatasetExt::from_path`](crate::DatasetExt::from_path).
pub const MANIFEST_LIMIT: u64 = 256 << 20;

/// Allowed values of [`StorageOptions::manifest_limit`]: 1 KiB to 16 GiB.
pub const MANIFEST_BYTES: zephon_core::settings::Range = zephon_core::settings::Range::new(
    1 << 10,
    16 << 30,
    "a manifest is read whole into memory before it is parsed",
);

/// Allowed values of [`StorageOptions::range_concurrency`]: 1 to 1,024.
pub const RANGE_CONCURRENCY: zephon_core::settings::Range = zephon_core::settings::Range::new(
    1,
    1024,
    "each request in flight holds a connection and its bytes",
);

/// Allowed values of [`StorageOptions::range_gap`] and
/// [`StorageOptions::range_part_gap`]: 0 to 16 MiB.
pub const RANGE_GAP: zephon_core::settings::Range =
    zephon_core::settings::Range::new(0, 16 << 20, "a gap's bytes are downloaded and dropped");

/// Allowed values of [`StorageOptions::range_parts`]: 1 to 4,096.
pub const RANGE_PARTS: zephon_core::settings::Range = zephon_core::settings::Range::new(
    1,
    4096,
    "a request's Range header holds at most 4 KiB of ranges anyway",
);

/// Most bytes one merged byte-range request spans (8 MiB): past it a run of
/// neighbours is split into more requests, which go out in parallel. A
/// single sample larger than this is still one request.
pub const RANGE_SPAN: u64 = 8 << 20;

impl StorageOptions {
    /// Checks the byte-range settings: `range_concurrency` in
    /// [`RANGE_CONCURRENCY`], `range_gap` and `range_part_gap` in
    /// [`RANGE_GAP`], `range_parts` in [`RANGE_PARTS`]; the error names
    /// the key at fault. Opening a backend checks them.
    ///
    /// ```
    /// use zephon_storage::StorageOptions;
    /// assert!(StorageOptions::default().validate_ranges().is_ok());
    /// let e = StorageOptions::default().range_concurrency(0).validate_ranges().unwrap_err();
    /// assert!(e.to_string().contains("range_concurrency"));
    /// let e = StorageOptions::default().range_gap(1 << 30).validate_ranges().unwrap_err();
    /// assert!(e.to_string().contains("range_gap"));
    /// let e = StorageOptions::default().range_part_gap(1 << 30).validate_ranges().unwrap_err();
    /// assert!(e.to_string().contains("range_part_gap"));
    /// let e = StorageOptions::default().range_parts(0).validate_ranges().unwrap_err();
    /// assert!(e.to_string().contains("range_parts"));
    /// ```
    pub fn validate_ranges(&self) -> zephon_core::Result<()> {
        RANGE_CONCURRENCY.check_usize("range_concurrency", self.range_concurrency)?;
        RANGE_GAP.check("range_gap", self.range_gap)?;
        RANGE_GAP.check("range_part_gap", self.range_part_gap)?;
        RANGE_PARTS.check_usize("range_parts", self.range_parts)?;
        Ok(())
    }

    /// Checks the settings opening a backend reads: the byte-range ones
    /// ([`validate_ranges`](Self::validate_ranges)), `manifest_limit` in
    /// [`MANIFEST_BYTES`], `min_rate` in [`MIN_RATE`], the timeouts in
    /// [`TIMEOUT_MS`], `block_deadline` in [`BLOCK_DEADLINE_MS`], `retries`
    /// in [`RETRIES`], the retry delays in
    /// [`RETRY_DELAY_MS`] (the largest not below the first) and
    /// `concurrency` in [`CONCURRENCY`]; the error names the key at fault. The cache's are checked when it opens
    /// ([`CacheOptions::validate`]).
    ///
    /// ```
    /// use zephon_storage::StorageOptions;
    /// assert!(StorageOptions::default().validate().is_ok());
    /// let e = StorageOptions::default().manifest_limit(10).validate().unwrap_err();
    /// assert!(e.to_string().contains("manifest_limit"), "{e}");
    /// let e = StorageOptions::default().range_parts(0).validate().unwrap_err();
    /// assert!(e.to_string().contains("range_parts"), "{e}");
    /// let e = StorageOptions::default().min_rate(1 << 40).validate().unwrap_err();
    /// assert!(e.to_string().contains("min_rate"), "{e}");
    /// let e = StorageOptions::default().io_timeout(std::time::Duration::MAX).validate().unwrap_err();
    /// assert!(e.to_string().contains("io_timeout"), "{e}");
    /// let e = StorageOptions::default().block_deadline(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(e.to_string().contains("block_deadline"), "{e}");
    /// let e = StorageOptions::default().retries(usize::MAX).validate().unwrap_err();
    /// assert!(e.to_string().contains("retries"), "{e}");
    /// ```
    pub fn validate(&self) -> zephon_core::Result<()> {
        self.validate_ranges()?;
        MANIFEST_BYTES.check("manifest_limit", self.manifest_limit)?;
        MIN_RATE.check("min_rate", self.min_rate)?;
        TIMEOUT_MS.check("timeout", self.timeout.as_millis())?;
        TIMEOUT_MS.check("io_timeout", self.io_timeout.as_millis())?;
        BLOCK_DEADLINE_MS.check("block_deadline", self.block_deadline.as_millis())?;
        RETRIES.check_usize("retries", self.retries)?;
        RETRY_DELAY_MS.check("retry_min_delay", self.retry_min_delay.as_millis())?;
        RETRY_DELAY_MS.check("retry_max_delay", self.retry_max_delay.as_millis())?;
        if self.retry_max_delay < self.retry_min_delay {
            return Err(zephon_core::Error::config(
                "retry_max_delay",
                format!(
                    "{:?} is below retry_min_delay ({:?})",
                    self.retry_max_delay, self.retry_min_delay
                ),
            ));
        }
        CONCURRENCY.check_usize("concurrency", self.concurrency)?;
        Ok(())
    }
}

/// Allowed values of [`StorageOptions::timeout`] and
/// [`StorageOptions::io_timeout`], in milliseconds: 1 ms to a day.
/// `Duration::MAX` ("no limit") overflowed the clock of the HTTP client
/// (a panic), and waited out the slow-server defence.
pub const TIMEOUT_MS: zephon_core::settings::Range = zephon_core::settings::Range::new(
    1,
    86_400_000,
    "a request that has not answered in a day is not coming",
);

/// Allowed values of [`CacheOptions::lock_wait`], in milliseconds: 0 (no
/// wait) to a day.
pub const LOCK_WAIT_MS: zephon_core::settings::Range = zephon_core::settings::Range::new(
    0,
    86_400_000,
    "past it a stalled process holds the others up for good",
);

/// Allowed values of [`StorageOptions::block_deadline`], in milliseconds:
/// 100 ms to a day.
pub const BLOCK_DEADLINE_MS: zephon_core::settings::Range = zephon_core::settings::Range::new(
    100,
    86_400_000,
    "one block or request, retries included, takes at most this long",
);

/// Bytes of a whole-shard download that each
/// [`StorageOptions::block_deadline`] covers (64 MiB): a shard of 200 MiB
/// gets four deadlines.
pub const DEADLINE_SPAN: u64 = 64 << 20;

/// Allowed values of [`StorageOptions::retries`]: 0 to 100.
pub const RETRIES: zephon_core::settings::Range = zephon_core::settings::Range::new(
    0,
    100,
    "a dead endpoint is retried this many times before the error",
);

/// Allowed values of [`StorageOptions::retry_min_delay`] and
/// [`StorageOptions::retry_max_delay`], in milliseconds: 0 to an hour.
pub const RETRY_DELAY_MS: zephon_core::settings::Range =
    zephon_core::settings::Range::new(0, 3_600_000, "a retry waits at most this long");

/// Allowed values of [`StorageOptions::concurrency`]: 1 to 4,096.
pub const CONCURRENCY: zephon_core::settings::Range = zephon_core::settings::Range::new(
    1,
    4096,
    "each request in flight holds a connection and its bytes",
);

/// Allowed values of [`CacheOptions::block_bytes`]: 64 KiB to 256 MiB.
pub const BLOCK_BYTES: zephon_core::settings::Range = zephon_core::settings::Range::new(
    64 << 10,
    256 << 20,
    "a block is downloaded, verified and held in memory whole",
);

/// The shard cache: a memory tier for hot blocks and a disk tier under `root`.
///
/// Uncompressed remote shards are cached in fixed-size blocks of
/// `block_bytes` (a shard no larger than one block is one block), so a shard
/// of any size streams through both tiers. Compressed shards (`.zst`, `.gz`)
/// cannot be read by range: each is downloaded whole into the cache's
/// folder and decoded straight into the disk tier's file for it (both into
/// the temporary folder where the disk tier is off or full), never into
/// memory, and cached as one entry, so its decoded size must fit
/// `limit_bytes`.
///
/// ```
/// use zephon_storage::CacheOptions;
/// use std::time::Duration;
/// let c = CacheOptions::default()
///     .root("/tmp/zephon-cache")
///     .limit_bytes(1 << 30)
///     .lock_wait(Duration::from_secs(60));
/// assert!(c.enabled && c.lock_wait == Duration::from_secs(60));
/// ```
#[derive(Clone, Debug)]
pub struct CacheOptions {
    /// Whether shards are cached at all. Without the cache every read
    /// downloads its whole shard (or its byte range in byte-range mode).
    pub enabled: bool,
    /// Folder of the disk tier (default `$ZEPHON_CACHE_DIR`, else `~/.cache/zephon`).
    /// Processes that share it (the ranks of a node) download each shard
    /// once between them.
    pub root: PathBuf,
    /// Capacity of the disk tier, in bytes, for each dataset location's
    /// folder as a whole, whichever processes wrote its entries; less when
    /// the filesystem has less room when the cache opens.
    pub limit_bytes: u64,
    /// Capacity of the memory tier, in bytes; at least `block_bytes`.
    pub memory_bytes: u64,
    /// Size of the blocks uncompressed remote shards are cached in, in
    /// bytes: [`BLOCK_BYTES`] (64 KiB to 256 MiB), at most `memory_bytes`,
    /// and at most `limit_bytes` less 4 KiB (a disk entry's header page). Default 4 MiB: large enough that a block costs one
    /// request at full bandwidth, small enough that a random sample does not
    /// pull much more than itself.
    pub block_bytes: u64,
    /// Longest wait for another process that is downloading the same shard
    /// into the shared folder; past it this process downloads the shard
    /// itself, without publishing it, so a stalled process cannot hang the
    /// others. In [`LOCK_WAIT_MS`] (0, no wait, to a day).
    pub lock_wait: Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        let root = std::env::var_os("ZEPHON_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("zephon"))
            })
            .unwrap_or_else(|| std::env::temp_dir().join("zephon-cache"));
        CacheOptions {
            enabled: true,
            root,
            limit_bytes: 16 << 30,
            memory_bytes: 1 << 30,
            block_bytes: 4 << 20,
            lock_wait: Duration::from_secs(600),
        }
    }
}

impl CacheOptions {
    /// Turns the cache on or off.
    pub fn enabled(mut self, v: bool) -> Self {
        self.enabled = v;
        self
    }

    /// Sets the disk tier's folder.
    pub fn root(mut self, v: impl Into<PathBuf>) -> Self {
        self.root = v.into();
        self
    }

    /// Sets the disk tier's capacity in bytes.
    pub fn limit_bytes(mut self, v: u64) -> Self {
        self.limit_bytes = v;
        self
    }

    /// Sets the memory tier's capacity in bytes.
    pub fn memory_bytes(mut self, v: u64) -> Self {
        self.memory_bytes = v;
        self
    }

    /// Sets the longest wait for another process's download of a shard.
    pub fn lock_wait(mut self, v: Duration) -> Self {
        self.lock_wait = v;
        self
    }

    /// Sets the block size in bytes (see [`block_bytes`](CacheOptions::block_bytes)).
    pub fn block_bytes(mut self, v: u64) -> Self {
        self.block_bytes = v;
        self
    }

    /// Checks the settings: `block_bytes` in [`BLOCK_BYTES`], a block fits
    /// either tier (see [`block_bytes`](CacheOptions::block_bytes)), and
    /// `lock_wait` is at most a day. The error names the key at fault.
    ///
    /// ```
    /// use zephon_storage::CacheOptions;
    /// assert!(CacheOptions::default().validate().is_ok());
    /// let e = CacheOptions::default().block_bytes(1).validate().unwrap_err();
    /// assert!(e.to_string().contains("cache.block_bytes"));
    /// let e = CacheOptions::default().memory_bytes(1 << 20).validate().unwrap_err();
    /// assert!(e.to_string().contains("cache.memory_bytes"));
    /// ```
    pub fn validate(&self) -> zephon_core::Result<()> {
        BLOCK_BYTES.check("cache.block_bytes", self.block_bytes)?;
        // A disk entry takes a page more than its block: its header.
        for (key, v, need) in [
            ("cache.memory_bytes", self.memory_bytes, self.block_bytes),
            (
                "cache.limit_bytes",
                self.limit_bytes,
                self.block_bytes + 4096,
            ),
        ] {
            if v < need {
                return Err(zephon_core::Error::config(
                    key,
                    format!(
                        "{v} bytes cannot hold one block of cache.block_bytes ({} bytes, \
                         {need} bytes with what the tier adds); raise it or lower cache.block_bytes",
                        self.block_bytes
                    ),
                ));
            }
        }
        LOCK_WAIT_MS.check("cache.lock_wait", self.lock_wait.as_millis())?;
        Ok(())
    }
}
