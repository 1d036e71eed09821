//! Errors that name the shard they are about, with text taken from input
//! made safe to print.

use zephon_core::Error;

/// A shard error: names the dataset and the shard's URI. Control
/// characters in the message (quoted from a shard or manifest, perhaps by
/// a parser's own message) are escaped.
pub fn shard_error(dataset: &str, uri: &str, message: impl Into<String>) -> Error {
    let message = message.into();
    Error::Dataset {
        dataset: dataset.to_owned(),
        location: uri.to_owned(),
        message: match escape_controls(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            escaped => escaped.into_owned(),
        },
    }
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`), so text
/// taken from input can neither drive a terminal nor split a log line.
///
/// ```
/// use zephon_storage::escape_controls;
/// assert_eq!(escape_controls("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
/// assert_eq!(escape_controls("plain \"text\""), "plain \"text\"");
/// ```
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}
