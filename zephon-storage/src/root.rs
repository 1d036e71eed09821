//! Keeping a dataset inside its root.
//!
//! A manifest, a Streaming index or a listing names the objects of a
//! dataset by path relative to the dataset's root. Those names come from
//! files anyone may have written, and the backends resolve them in ways
//! that can leave the root: a local join follows `..` and replaces the root
//! with an absolute path, HTTP clients fold `..` segments out of a URL (so
//! `../../other-bucket/key` on S3 reads another bucket), and opendal trims
//! whitespace and empty segments (so `a//b` and ` a` name `a/b` and `a`).
//! [`check_relative`] accepts only names that mean the same object on every
//! backend and stay under the root; every manifest entry, sidecar and listed
//! key passes through it before anything is read.

/// Checks that `path` is a plain relative path under a dataset root:
/// non-empty `/`-separated names, none of them empty, `.` or `..`; not
/// absolute, not a URI; no backslashes, control characters, or names with
/// leading or trailing whitespace. The error says what is wrong, without the path
/// (callers name it, with the manifest or listing it came from).
pub fn check_relative(path: &str) -> Result<(), String> {
    let outside = "leaves the dataset root; a manifest names objects under its dataset's root only";
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.contains("://") {
        return Err(format!("is a URI: {outside}"));
    }
    if path.starts_with('/') {
        return Err(format!("is absolute: {outside}"));
    }
    if path.contains('\\') {
        return Err("contains a backslash; use `/` between names".into());
    }
    if path.chars().any(char::is_control) {
        return Err("contains control characters".into());
    }
    for name in path.split('/') {
        // Some tools trim names: ` ..` must not become `..` anywhere.
        if name.trim() != name {
            return Err("has a name that begins or ends with whitespace".into());
        }
        match name {
            ".." => return Err(format!("has a `..` component: {outside}")),
            "." | "" => {
                return Err(
                    "is not a plain relative path (it has an empty or `.` component)".into(),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_relative;

    #[test]
    fn plain_relative_paths_pass() {
        for p in [
            "a.jsonl",
            "train/a b.jsonl",
            "x/y/z.mds.zstd",
            "..a",
            "a..",
            ".hidden",
        ] {
            assert!(check_relative(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn paths_that_leave_or_alias_the_root_fail() {
        for p in [
            "",
            "..",
            "../a",
            "a/../../b",
            "a/..",
            "/abs",
            "//host/x",
            "s3://other/x",
            "http://h/x",
            "a\\..\\b",
            "a//b",
            "./a",
            "a/./b",
            "a/",
            " a",
            "a ",
            "a\n",
            "a\0b",
            "a/ ../b",
            "a/.. ",
        ] {
            assert!(check_relative(p).is_err(), "{p:?}");
        }
    }
}
