//! The members of a tar, each with its full name and where its data lies,
//! read from the archive's raw entries.
//!
//! A GNU long name and a pax extended header are members of their own
//! whose data describes the member after them; the `tar` crate reads that
//! data whole into memory, however large its header says it is, so a
//! shard of tens of GB holding one such member took as much memory as the
//! member (a 400 MB long name: 1.3 GB of RssAnon and 6 s to open). They
//! are read here instead, each held to [`MAX_EXTENDED_HEADER`].

use super::FormatResult;
use std::io::Read;
use tar::PaxExtensions;

/// Most bytes a GNU long name or long link, or a pax extended header, may
/// take: names are at most a few KB (`PATH_MAX` is 4,096 on Linux) and pax
/// headers, a name with a few numbers and attributes, rarely pass that.
pub const MAX_EXTENDED_HEADER: u64 = 1 << 20;

/// A member of a tar: its name (a long name's or pax header's where one
/// precedes it), where its data starts and how long it is.
pub(super) struct Found {
    pub path: String,
    pub offset: u64,
    pub size: u64,
    /// A regular file (not a folder, link or device).
    pub file: bool,
}

/// What the extended headers read so far say of the next member.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_size: Option<Vec<u8>>,
    /// Where the first of them starts, for an error naming it.
    at: Option<u64>,
}

/// Calls `each` with every member of the tar read from `reader`, a shard
/// of `total` bytes, in order; a member whose data runs past the end of
/// the bytes, or a tar that stops before its end-of-archive block (both
/// truncations), is an error naming the member.
pub(super) fn members(
    reader: impl Read,
    total: u64,
    mut each: impl FnMut(Found) -> FormatResult<()>,
) -> FormatResult<()> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar archive: {}", e.to_string().escape_debug()))?
        .raw(true);
    let mut pending = Pending::default();
    // Where the block after the last member starts, and that member.
    let mut end = 0u64;
    let mut last = String::new();
    for entry in entries {
        // The tar crate's messages quote raw header bytes (member names,
        // numeric fields): escaped, so a hostile shard cannot write control
        // sequences to a terminal or log.
        let mut entry = entry
            .map_err(|e| format!("corrupt or truncated tar: {}", e.to_string().escape_debug()))?;
        let (offset, size) = (entry.raw_file_position(), entry.size());
        let kind = entry.header().entry_type();
        let extended = kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions();
        let path = if extended {
            format!("extended header at byte {}", offset.saturating_sub(512))
        } else {
            let bytes = match pending.long_name.take() {
                Some(mut name) => {
                    if name.last() == Some(&0) {
                        name.pop();
                    }
                    name
                }
                None => match pending.pax_path.take() {
                    Some(path) => path,
                    None => entry.header().path_bytes().into_owned(),
                },
            };
            let path = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(pax) = pending.pax_size.take()
                && std::str::from_utf8(&pax).ok().and_then(|s| s.parse().ok()) != Some(size)
            {
                return Err(format!(
                    "member {path:?}: its pax header gives a size of {} where its header gives \
                     {size} (members of 8 GiB or more are not supported)",
                    String::from_utf8_lossy(&pax).escape_debug()
                ));
            }
            pending = Pending::default();
            path
        };
        if offset.saturating_add(size) > total {
            return Err(format!(
                "member {path:?} needs bytes {offset}..{} but the tar ends at {total}; truncated?",
                offset as u128 + size as u128,
            ));
        }
        end = offset + size.div_ceil(512) * 512;
        last.clone_from(&path);
        if extended {
            read_extended(&mut entry, kind, size, &path, &mut pending)?;
            pending.at.get_or_insert(offset);
            continue;
        }
        each(Found {
            path,
            offset,
            size,
            file: kind.is_file(),
        })?;
    }
    if let Some(at) = pending.at {
        return Err(format!(
            "the extended header at byte {} describes no member: the tar ends after it",
            at.saturating_sub(512)
        ));
    }
    // The tar reader stops quietly at the end of the bytes, so a shard cut
    // between two members would lose the rest without a word; a whole tar
    // ends with zero blocks (every writer adds two).
    if total < end + 512 {
        return Err(format!(
            "the tar ends at byte {total} without its end-of-archive block{}; truncated?",
            if last.is_empty() {
                String::new()
            } else {
                format!(", after member {last:?}")
            }
        ));
    }
    Ok(())
}

/// Reads an extended header of `size` bytes (its data), held to
/// [`MAX_EXTENDED_HEADER`], into what it says of the next member.
fn read_extended(
    entry: &mut impl Read,
    kind: tar::EntryType,
    size: u64,
    path: &str,
    pending: &mut Pending,
) -> FormatResult<()> {
    if size > MAX_EXTENDED_HEADER {
        return Err(format!(
            "{path}: {size} bytes, more than the {MAX_EXTENDED_HEADER} a long name or pax header may take"
        ));
    }
    let mut data = Vec::with_capacity(size as usize);
    entry
        .read_to_end(&mut data)
        .map_err(|e| format!("{path}: {}", e.to_string().escape_debug()))?;
    let twice = |what: &str| format!("{path}: a second {what} for the same member");
    if kind.is_gnu_longname() {
        if pending.long_name.is_some() {
            return Err(twice("long name"));
        }
        pending.long_name = Some(data);
    } else if kind.is_pax_local_extensions() {
        if pending.pax_path.is_some() {
            return Err(twice("pax header"));
        }
        for ext in PaxExtensions::new(&data) {
            let ext = ext
                .map_err(|e| format!("{path}: bad pax header: {}", e.to_string().escape_debug()))?;
            match ext.key_bytes() {
                b"path" => pending.pax_path = Some(ext.value_bytes().to_vec()),
                // The next member's header size is where the tar crate
                // looks for the header after it: a pax size that differs
                // (a member of 8 GiB or more) would be read as
                // misplaced headers.
                b"size" => pending.pax_size = Some(ext.value_bytes().to_vec()),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tar::{Builder, EntryType, Header};

    fn names(tar: &[u8]) -> FormatResult<Vec<(String, u64)>> {
        let mut out = Vec::new();
        members(tar, tar.len() as u64, |m| {
            out.push((m.path, m.size));
            Ok(())
        })?;
        Ok(out)
    }

    fn file(b: &mut Builder<Vec<u8>>, mut h: Header, path: &str, data: &[u8]) {
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, data).unwrap();
    }

    /// An extended header written by hand: `kind`, and `data` as its data.
    fn extended(b: &mut Builder<Vec<u8>>, kind: EntryType, data: &[u8]) {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_path("././@LongLink").unwrap();
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }

    /// Names past a header's 100 bytes, however the writer spelled them (a
    /// GNU long name, a ustar prefix, a pax header with other keys beside
    /// the path, as Python's `tarfile` writes by default), name their
    /// members; the member after one is named by its own header again.
    #[test]
    fn long_names_and_pax_paths_name_their_members() {
        let long = format!("{}/0001.txt", "d".repeat(150));
        let prefixed = format!("{}/0002.txt", "p".repeat(90));
        let mut b = Builder::new(Vec::new());
        file(&mut b, Header::new_gnu(), &long, b"one");
        file(&mut b, Header::new_ustar(), &prefixed, b"two");
        b.append_pax_extensions([
            ("mtime", &b"1700000000.25"[..]),
            ("path", "dïr/0003.txt".as_bytes()),
            ("size", b"5"),
        ])
        .unwrap();
        file(&mut b, Header::new_ustar(), "placeholder.txt", b"three");
        file(&mut b, Header::new_gnu(), "0004.txt", b"four");
        let tar = b.into_inner().unwrap();
        let want = [
            (long, 3),
            (prefixed, 3),
            ("dïr/0003.txt".to_owned(), 5),
            ("0004.txt".to_owned(), 4),
        ];
        assert_eq!(names(&tar).unwrap(), want);
    }

    /// A long name or pax header is read whole, so it is held to
    /// `MAX_EXTENDED_HEADER`: one byte more is refused naming where it
    /// lies, before its data is read.
    #[test]
    fn an_extended_header_past_the_bound_is_refused_naming_it() {
        let bound = MAX_EXTENDED_HEADER as usize;
        for kind in [EntryType::GNULongName, EntryType::XHeader] {
            let mut b = Builder::new(Vec::new());
            file(&mut b, Header::new_gnu(), "0001.txt", b"one");
            extended(&mut b, kind, &vec![b'a'; bound + 1]);
            file(&mut b, Header::new_gnu(), "0002.txt", b"two");
            let e = names(&b.into_inner().unwrap()).unwrap_err();
            assert!(
                e.contains("extended header at byte 1024") && e.contains(&format!("{}", bound + 1)),
                "{kind:?}: {e}"
            );
        }
        let mut b = Builder::new(Vec::new());
        extended(&mut b, EntryType::GNULongName, &vec![b'a'; bound]);
        file(&mut b, Header::new_gnu(), "0002.txt", b"two");
        let got = names(&b.into_inner().unwrap()).unwrap();
        assert_eq!((got.len(), got[0].0.len()), (1, bound));
    }

    /// What the tar crate refuses of extended headers, refused here too,
    /// naming the place: two long names for one member, one describing no
    /// member, a pax size that is not the header's (where the next header
    /// lies would be wrong).
    #[test]
    fn extended_headers_that_describe_no_member_or_a_wrong_size_are_refused() {
        let mut b = Builder::new(Vec::new());
        extended(&mut b, EntryType::GNULongName, b"a.txt");
        extended(&mut b, EntryType::GNULongName, b"b.txt");
        file(&mut b, Header::new_gnu(), "0001.txt", b"one");
        let e = names(&b.into_inner().unwrap()).unwrap_err();
        assert!(e.contains("second long name"), "{e}");

        let mut b = Builder::new(Vec::new());
        file(&mut b, Header::new_gnu(), "0001.txt", b"one");
        extended(&mut b, EntryType::GNULongName, b"a.txt");
        let e = names(&b.into_inner().unwrap()).unwrap_err();
        assert!(e.contains("byte 1024 describes no member"), "{e}");

        let mut b = Builder::new(Vec::new());
        b.append_pax_extensions([("size", &b"9000000000"[..])])
            .unwrap();
        file(&mut b, Header::new_ustar(), "0001.txt", b"one");
        let e = names(&b.into_inner().unwrap()).unwrap_err();
        assert!(
            e.contains("\"0001.txt\"") && e.contains("9000000000"),
            "{e}"
        );
    }
}
