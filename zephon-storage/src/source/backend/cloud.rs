//! Google Cloud Storage (`gs://bucket/prefix`) and Azure Blob Storage
//! (`azblob://container/prefix`): where their endpoint and credentials come
//! from, options first, then the environment variables their own tools read.

use crate::options::StorageOptions;
use opendal::{Operator, services};

/// A non-empty environment variable.
fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// Splits `rest` (what follows `scheme://`) into the bucket or container and
/// the prefix under it; refuses an empty first name, saying what the URI
/// should look like.
pub(super) fn split_root<'a>(
    scheme: &str,
    what: &str,
    rest: &'a str,
) -> Result<(&'a str, &'a str), String> {
    let (first, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if first.is_empty() {
        return Err(format!(
            "a {scheme}:// URI needs a {what}: {scheme}://{what}/prefix"
        ));
    }
    Ok((first, prefix))
}

#[cfg(feature = "gcs")]
/// `STORAGE_EMULATOR_HOST` as Google's client libraries take it: `host:port`
/// or a URL.
fn with_scheme(host: String) -> String {
    if host.contains("://") {
        host
    } else {
        format!("http://{host}")
    }
}

/// A GCS operator rooted at `prefix` in `bucket`.
///
/// Endpoint: `opts.endpoint`, else `STORAGE_EMULATOR_HOST` (then requests go
/// unsigned, as Google's libraries send them to an emulator), else Google's.
/// Credentials: `GOOGLE_APPLICATION_CREDENTIALS`, the gcloud default
/// credentials file, or the metadata server on Google Cloud; none with
/// `opts.anonymous` (public buckets).
#[cfg(feature = "gcs")]
pub(super) fn gcs(bucket: &str, prefix: &str, opts: &StorageOptions) -> opendal::Result<Operator> {
    let mut b = services::Gcs::default()
        .bucket(bucket)
        .root(&format!("/{prefix}"));
    let emulator = env("STORAGE_EMULATOR_HOST").map(with_scheme);
    let unsigned = opts.anonymous || (opts.endpoint.is_none() && emulator.is_some());
    if let Some(e) = opts.endpoint.clone().or(emulator) {
        b = b.endpoint(&e);
    }
    if unsigned {
        b = b.skip_signature();
    }
    Operator::new(b)
}

/// An Azure Blob operator rooted at `prefix` in `container`.
///
/// With `AZURE_STORAGE_CONNECTION_STRING` set, it names the account, its
/// endpoint and key (`UseDevelopmentStorage=true` is Azurite); otherwise the
/// account is `opts.account_name`, `AZURE_STORAGE_ACCOUNT` or
/// `AZURE_STORAGE_ACCOUNT_NAME`, the key `opts.account_key`,
/// `AZURE_STORAGE_KEY` or `AZURE_STORAGE_ACCOUNT_KEY`, and the endpoint
/// `opts.endpoint` or the account's public one. A SAS token
/// (`opts.sas_token`, `AZURE_STORAGE_SAS_TOKEN`) may stand for the key;
/// without either, the Azure credential chain (Entra ID, managed identity)
/// is asked; `opts.anonymous` signs nothing (public containers). Options
/// override the environment.
#[cfg(feature = "azblob")]
pub(super) fn azblob(
    container: &str,
    prefix: &str,
    opts: &StorageOptions,
) -> Result<Operator, String> {
    let ext = |e: opendal::Error| format!("cannot configure the backend: {e}");
    let conn = env("AZURE_STORAGE_CONNECTION_STRING");
    let mut b = match &conn {
        Some(c) => services::Azblob::from_connection_string(c).map_err(|e| {
            format!("AZURE_STORAGE_CONNECTION_STRING is not a usable connection string: {e}")
        })?,
        None => services::Azblob::default(),
    };
    b = b.container(container).root(&format!("/{prefix}"));
    let from_env = |keys: &[&str]| {
        if conn.is_some() {
            None
        } else {
            keys.iter().find_map(|k| env(k))
        }
    };
    let account = opts
        .account_name
        .clone()
        .or_else(|| from_env(&["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME"]));
    if let Some(a) = &account {
        b = b.account_name(a);
    }
    match (&opts.endpoint, &account) {
        (Some(e), _) => b = b.endpoint(e),
        (None, _) if conn.is_some() => {}
        (None, Some(a)) => b = b.endpoint(&format!("https://{a}.blob.core.windows.net")),
        (None, None) => {
            return Err(
                "an azblob:// URI needs a storage account: set AZURE_STORAGE_ACCOUNT \
                 (or AZURE_STORAGE_CONNECTION_STRING), or an endpoint"
                    .into(),
            );
        }
    }
    if let Some(k) = opts
        .account_key
        .clone()
        .or_else(|| from_env(&["AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"]))
    {
        b = b.account_key(&k);
    }
    if let Some(t) = opts
        .sas_token
        .clone()
        .or_else(|| env("AZURE_STORAGE_SAS_TOKEN"))
    {
        b = b.sas_token(&t);
    }
    if opts.anonymous {
        b = b.skip_signature();
    }
    Operator::new(b).map_err(ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_bucket_or_container_is_refused_with_the_expected_form() {
        assert_eq!(split_root("gs", "bucket", "b/p/q"), Ok(("b", "p/q")));
        assert_eq!(split_root("gs", "bucket", "b"), Ok(("b", "")));
        let e = split_root("azblob", "container", "/p").unwrap_err();
        assert!(e.contains("azblob://container/prefix"), "{e}");
    }

    #[test]
    fn an_emulator_host_gets_a_scheme() {
        assert_eq!(
            with_scheme("127.0.0.1:9023".into()),
            "http://127.0.0.1:9023"
        );
        assert_eq!(with_scheme("https://h".into()), "https://h");
    }
}
