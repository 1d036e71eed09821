//! Bounds on what a chat template may build and print. The engine's fuel
//! counts instructions, not the size of what one instruction prints: a
//! list that holds itself twice, nested forty times, is forty instructions
//! and 2^40 elements to print, and a list nested a hundred thousand deep,
//! built by a loop, overflows the stack of whatever walks it. So each value
//! that leaves the template (`{{ }}`, `tojson`, `pprint`, `string`, `~`, the
//! filters taking text, Python's methods) is
//! measured first, without recursion, and refused past these bounds.
//!
//! The fuel charges a string once it is made, so one operation could still
//! ask for gigabytes at once (`~` of a list holding itself twice forty
//! times over, `replace` with a long replacement): the text that operators
//! and filters make is bounded by [`MAX_STRING_BYTES`] where it is asked
//! for (see `operators` and `filters`), and what a rendering writes by
//! [`MAX_RENDER_BYTES`].

use minijinja::machinery::Token;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};
use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io;

/// The largest chat template source, in bytes (real ones are a few KB).
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// The most filters one expression of a template may chain
/// (`x | f | g | ...`): the engine compiles a chain by recursion.
pub const MAX_FILTER_CHAIN: usize = 256;

/// The most binary operators (`+ - * / % ~ and or`, outside string
/// literals) one tag of a template may hold: the engine parses a chain of
/// them into a tree as deep as the chain and compiles and drops it by
/// recursion (twenty thousand `+` overflowed the stack of the thread
/// compiling it).
pub const MAX_OPERATOR_CHAIN: usize = 256;

/// The deepest nesting of lists and maps a template may print.
pub const MAX_VALUE_DEPTH: usize = 256;

/// The most elements (counted with repeats, nested ones included) a value
/// a template prints may hold.
pub const MAX_VALUE_ELEMENTS: u64 = 1 << 20;

/// The longest text, in bytes, that one operator (`+`, `~`, `*`) or
/// filter of a template may make, and the most text a list or map it
/// prints may hold. Real templates make strings the size of the
/// conversation.
pub const MAX_STRING_BYTES: usize = 64 << 20;

/// The most text, in bytes, that one rendering of a chat template may
/// write: a conversation of more than this is refused (16 Mi tokens, the
/// longest `max_length`, are about this much text).
pub const MAX_RENDER_BYTES: usize = 64 << 20;

pub(super) fn refused(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Refuses a template source past [`MAX_TEMPLATE_BYTES`] or with a filter
/// chain past [`MAX_FILTER_CHAIN`].
pub(super) fn check_source(source: &str) -> Result<(), String> {
    if source.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "the template is {} bytes, more than {MAX_TEMPLATE_BYTES}",
            source.len()
        ));
    }
    let mut line = 1;
    let mut chain = 0;
    let mut inside = false;
    let bytes = source.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\n' => line += 1,
            b'{' if matches!(bytes.get(i + 1), Some(b'{' | b'%')) => {
                inside = true;
                chain = 0;
            }
            b'}' if i > 0 && matches!(bytes[i - 1], b'}' | b'%') => inside = false,
            b'|' if inside => {
                chain += 1;
                if chain > MAX_FILTER_CHAIN {
                    return Err(format!(
                        "template line {line}: more than {MAX_FILTER_CHAIN} filters in one expression"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a tag of `source` with more than [`MAX_OPERATOR_CHAIN`]
/// operators, counted with the engine's own lexer; a source it cannot read
/// is left for the compiler to report.
pub(super) fn check_operators(source: &str, syntax: SyntaxConfig) -> Result<(), String> {
    let mut operators = 0;
    for token in minijinja::machinery::tokenize(source, false, syntax) {
        let Ok((token, span)) = token else {
            return Ok(());
        };
        match token {
            Token::VariableStart | Token::BlockStart => operators = 0,
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::FloorDiv
            | Token::Mod
            | Token::Pow
            | Token::Tilde
            | Token::Ident("and" | "or") => {
                operators += 1;
                if operators > MAX_OPERATOR_CHAIN {
                    return Err(format!(
                        "template line {}: more than {MAX_OPERATOR_CHAIN} operators in one tag",
                        span.start_line
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses `value` when it nests deeper than [`MAX_VALUE_DEPTH`] or holds
/// more than [`MAX_VALUE_ELEMENTS`] or [`MAX_STRING_BYTES`] of strings;
/// `what` names the use in the error.
pub(super) fn check_value(value: &Value, what: &str) -> Result<(), Error> {
    // Plain values, the common case, cost one match.
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
    ) {
        return Ok(());
    }
    let mut todo = vec![(value.clone(), 0usize)];
    let mut elements: u64 = 0;
    let mut bytes: usize = 0;
    while let Some((v, depth)) = todo.pop() {
        elements += 1;
        if let Some(s) = v.as_str() {
            bytes = bytes.saturating_add(s.len());
            if bytes > MAX_STRING_BYTES {
                return Err(refused(format!(
                    "{what}: a value holding more than {MAX_STRING_BYTES} bytes of text"
                )));
            }
        }
        if elements > MAX_VALUE_ELEMENTS {
            return Err(refused(format!(
                "{what}: a value of more than {MAX_VALUE_ELEMENTS} elements"
            )));
        }
        if depth > MAX_VALUE_DEPTH {
            return Err(refused(format!(
                "{what}: a value nested more than {MAX_VALUE_DEPTH} deep"
            )));
        }
        match v.kind() {
            ValueKind::Seq | ValueKind::Iterable => {
                for item in v.try_iter()? {
                    todo.push((item, depth + 1));
                    if todo.len() as u64 > MAX_VALUE_ELEMENTS {
                        break;
                    }
                }
            }
            ValueKind::Map => {
                for key in v.try_iter()? {
                    let item = v.get_item(&key)?;
                    todo.push((key, depth + 1));
                    todo.push((item, depth + 1));
                    if todo.len() as u64 > MAX_VALUE_ELEMENTS {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A string that refuses to grow past a bound.
struct Capped {
    text: String,
    cap: usize,
}

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len() + s.len() > self.cap {
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// `value` as the text that `~` and the filters taking text make of it
/// (its `Display`): measured by [`check_value`] first (the engine prints a
/// structure by recursion), then written into a string that stops at
/// [`MAX_STRING_BYTES`], so a structure of a few elements that prints as
/// terabytes ends at the bound.
pub(super) fn text_of<'a>(value: &'a Value, what: &str) -> Result<Cow<'a, str>, Error> {
    if let Some(s) = value.as_str() {
        return Ok(Cow::Borrowed(s));
    }
    check_value(value, what)?;
    let mut out = Capped {
        text: String::new(),
        cap: MAX_STRING_BYTES,
    };
    write!(out, "{value}").map_err(|_| too_long(what))?;
    Ok(Cow::Owned(out.text))
}

/// The error for text past [`MAX_STRING_BYTES`] made by `what`.
pub(super) fn too_long(what: &str) -> Error {
    refused(format!(
        "{what}: text of more than {MAX_STRING_BYTES} bytes (tokenize_chat::MAX_STRING_BYTES)"
    ))
}

/// The writer a rendering writes into: it fails past [`MAX_RENDER_BYTES`],
/// which ends the rendering (`passed` tells the error apart).
#[derive(Default)]
pub(super) struct RenderBuffer {
    pub(super) bytes: Vec<u8>,
    pub(super) passed: bool,
}

impl io::Write for RenderBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDER_BYTES {
            self.passed = true;
            return Err(io::Error::other("past MAX_RENDER_BYTES"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
