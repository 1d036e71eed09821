//! The HTTP clients of every backend: one for plain `http://` endpoints
//! that loads no TLS roots, one for `https://` that loads the system's.
//!
//! Building a client that verifies certificates reads the system's root
//! store (every file of `/etc/ssl/certs` on Debian), in every process, on
//! the way to its first request. A dataset on a plain-HTTP
//! endpoint (MinIO, nginx or moto on the cluster's network) never uses
//! them, and a warm pass over a cached dataset otherwise spends most of its
//! start there. So requests to `http://` URLs go through a client without
//! roots, and the verifying client is built on the first `https://` one.
//!
//! A plain-HTTP server may redirect to HTTPS. The plain client follows
//! redirects within plain HTTP only and hands a redirect to `https://`
//! back; the request is then sent again through the verifying client,
//! which follows it as a single client would have.
//!
//! Every response body is bounded: a success's held to the backend's
//! slowest accepted rate ([`Pacing`]), a listing page's to
//! [`LIST_PAGE`] bytes, an error's cut to its message ([`ERROR_BODY`]
//! bytes); a ranged answer must be the range asked
//! ([`content_range`]); and an answer to a read conditional on an ETag
//! must carry that ETag where it names one ([`super::version`]).

use super::content_range;
use super::pace::{Paced, Pacing};
use http::{Request, Response};
use opendal::{Buffer, HttpBody, HttpTransport, HttpTransporter};
use opendal_http_transport_reqwest::ReqwestTransport;
use std::sync::LazyLock;

/// Redirects one request follows, as reqwest's default policy.
const MAX_REDIRECTS: usize = 10;

/// A client for plain-HTTP URLs with `configure`'s settings: no TLS roots
/// loaded, redirects followed while they stay on plain HTTP.
pub(crate) fn plain_client(
    configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> reqwest::Result<reqwest::Client> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.url().scheme() != "http" {
            // Handed back: the caller sends it through a client that
            // verifies certificates.
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    });
    configure(reqwest::Client::builder())
        .redirect(policy)
        .tls_certs_only(std::iter::empty())
        .build()
}

/// Whether `resp` redirects to an `https://` URL (what [`plain_client`]
/// hands back instead of following).
pub(crate) fn redirects_to_tls(status: http::StatusCode, headers: &http::HeaderMap) -> bool {
    status.is_redirection()
        && headers
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .is_some_and(|l| l.len() >= 8 && l[..8].eq_ignore_ascii_case("https://"))
}

static PLAIN: LazyLock<Result<ReqwestTransport, String>> = LazyLock::new(|| {
    plain_client(|b| b)
        .map(ReqwestTransport::new)
        .map_err(|e| super::error_chain(&e))
});

static SECURE: LazyLock<Result<ReqwestTransport, String>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .build()
        .map(ReqwestTransport::new)
        .map_err(|e| super::error_chain(&e))
});

fn transport(
    t: &'static LazyLock<Result<ReqwestTransport, String>>,
) -> opendal::Result<&'static ReqwestTransport> {
    t.as_ref().map_err(|e| {
        opendal::Error::new(
            opendal::ErrorKind::Unexpected,
            format!("cannot build an HTTP client: {e}"),
        )
    })
}

/// The transport of a backend's operator (see the module docs).
pub(crate) struct Transport {
    pacing: Pacing,
}

impl Transport {
    /// This transport, its bodies held to `pacing`, as an operator takes it.
    pub(crate) fn transporter(pacing: Pacing) -> HttpTransporter {
        HttpTransporter::new(Transport { pacing })
    }

    /// `resp` with its body bounded (see the module docs); `listing`: the
    /// answer to a page of a listing.
    fn bounded(&self, resp: Response<HttpBody>, listing: bool) -> Response<HttpBody> {
        if !resp.status().is_success() {
            return resp.map(error_body);
        }
        let pacing = self.pacing;
        resp.map(|body| {
            body.map_inner(|s| match listing {
                true => Box::new(Paced::new(list_page(s), pacing)),
                false => Box::new(Paced::new(s, pacing)),
            })
        })
    }
}

/// Most bytes of an error answer's body read: its message. The services
/// read an error's body whole before they parse it, so a server answering
/// `500` with gigabytes would have them all in memory.
const ERROR_BODY: usize = 4 << 10;

type BodyStream =
    Box<dyn futures::Stream<Item = opendal::Result<Buffer>> + Send + Sync + Unpin + 'static>;

/// `body`, an error answer's, cut to its first [`ERROR_BODY`] bytes (and
/// no longer held to its declared length, which it may not reach now).
fn error_body(body: HttpBody) -> HttpBody {
    use futures::StreamExt;
    // The body's stream taken out of it: `map_inner` hands it over once.
    let mut inner: Option<BodyStream> = None;
    drop(body.map_inner(|s| {
        inner = Some(s);
        Box::new(futures::stream::empty())
    }));
    let mut left = ERROR_BODY;
    let cut = futures::stream::iter(inner)
        .flatten()
        .map(move |chunk| {
            chunk.map(|mut b| {
                b.truncate(left);
                left -= b.len();
                b
            })
        })
        .take_while(|chunk| std::future::ready(!matches!(chunk, Ok(b) if b.is_empty())));
    HttpBody::new(cut, None)
}

/// Most bytes of one page of a listing: the services read a page whole
/// before they parse it, and a page of a thousand names is well under a
/// MiB, so a longer one is a broken or hostile answer, not a listing.
const LIST_PAGE: u64 = 64 << 20;

/// Whether `req` asks for a page of a listing: the services mark the
/// requests of a listing as such (a listing at a bucket's or container's
/// root carries no `prefix`, and the Hugging Face tree API never does);
/// failing the mark, a `GET` with a `prefix` query parameter, as S3's,
/// Google Cloud Storage's and Azure Blob's listings all are (their object
/// reads have none).
fn is_listing(req: &Request<Buffer>) -> bool {
    use opendal::raw::Operation;
    if req.extensions().get::<Operation>() == Some(&Operation::List) {
        return true;
    }
    req.method() == http::Method::GET
        && req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv.split('=').next() == Some("prefix"))
        })
}

/// A listing page's body, an error once it passes [`LIST_PAGE`] bytes.
fn list_page(inner: BodyStream) -> impl futures::Stream<Item = opendal::Result<Buffer>> + Unpin {
    use futures::StreamExt;
    let mut got = 0u64;
    inner.map(move |chunk| {
        let b = chunk?;
        got += b.len() as u64;
        if got > LIST_PAGE {
            return Err(opendal::Error::new(
                opendal::ErrorKind::Unexpected,
                format!(
                    "a page of the listing runs past {LIST_PAGE} bytes (read no further): \
                     not a listing this reader holds; write an index.json to open the \
                     dataset without listing"
                ),
            ));
        }
        Ok(b)
    })
}

/// A copy of `req` to send again; its body is shared, not copied.
fn copy(req: &Request<Buffer>) -> Request<Buffer> {
    let mut again = Request::new(req.body().clone());
    *again.method_mut() = req.method().clone();
    *again.uri_mut() = req.uri().clone();
    *again.version_mut() = req.version();
    *again.headers_mut() = req.headers().clone();
    *again.extensions_mut() = req.extensions().clone();
    again
}

impl HttpTransport for Transport {
    async fn fetch(&self, req: Request<Buffer>) -> opendal::Result<Response<HttpBody>> {
        let asked = content_range::asked(req.headers());
        let if_match = req
            .headers()
            .get(http::header::IF_MATCH)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let listing = is_listing(&req);
        let resp = if req.uri().scheme_str() != Some("http") {
            transport(&SECURE)?.fetch(req).await?
        } else {
            let again = copy(&req);
            let resp = transport(&PLAIN)?.fetch(req).await?;
            if redirects_to_tls(resp.status(), resp.headers()) {
                transport(&SECURE)?.fetch(again).await?
            } else {
                resp
            }
        };
        if let Some(asked) = asked
            && resp.status() == http::StatusCode::PARTIAL_CONTENT
        {
            // Temporary: retried like any answer the store may mend on
            // another try (a proxy or cache in front of it answering wrong).
            content_range::check(asked, resp.headers()).map_err(|m| {
                opendal::Error::new(opendal::ErrorKind::Unexpected, m).set_temporary()
            })?;
        }
        if let Some(asked) = &if_match
            && resp.status().is_success()
            && let Some(m) = super::version::other_etag(asked, resp.headers())
        {
            return Err(opendal::Error::new(
                opendal::ErrorKind::ConditionNotMatch,
                m,
            ));
        }
        Ok(self.bounded(resp, listing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_a_get_with_a_prefix() {
        let req = |m: http::Method, uri: &str| {
            let mut r = Request::new(Buffer::new());
            *r.method_mut() = m;
            *r.uri_mut() = uri.parse().unwrap();
            r
        };
        let get = http::Method::GET;
        assert!(is_listing(&req(
            get.clone(),
            "http://h/b?list-type=2&prefix=data%2F"
        )));
        assert!(is_listing(&req(
            get.clone(),
            "http://h/c?restype=container&comp=list&prefix=d"
        )));
        assert!(is_listing(&req(
            get.clone(),
            "http://h/storage/v1/b/b/o?prefix=d&delimiter="
        )));
        assert!(!is_listing(&req(get.clone(), "http://h/b/data/a.jsonl")));
        assert!(!is_listing(&req(
            get.clone(),
            "http://h/storage/v1/b/b/o/a?alt=media"
        )));
        assert!(!is_listing(&req(
            get,
            "http://h/c/a.jsonl?sv=1&sig=x&prefixes=1"
        )));
        assert!(!is_listing(&req(http::Method::PUT, "http://h/b?prefix=d")));
    }

    #[test]
    fn only_a_redirect_to_https_is_handed_back() {
        let headers = |l: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::LOCATION, l.parse().unwrap());
            h
        };
        let moved = http::StatusCode::MOVED_PERMANENTLY;
        assert!(redirects_to_tls(moved, &headers("https://example.org/a")));
        assert!(redirects_to_tls(moved, &headers("HTTPS://example.org/a")));
        assert!(!redirects_to_tls(moved, &headers("http://example.org/a")));
        assert!(!redirects_to_tls(moved, &headers("/a")));
        assert!(!redirects_to_tls(
            http::StatusCode::OK,
            &headers("https://example.org/a")
        ));
    }
}
