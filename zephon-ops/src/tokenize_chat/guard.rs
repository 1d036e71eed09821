//! The rewrite that puts the operators which make text (`+`, `~`, `*`)
//! under the bounds of `operators`: the engine has no hook on them (`~`
//! prints a structure with `format!`, so a list holding itself twice forty
//! times over ran until memory ended), so each `a + b`, `a ~ b` and
//! `a * b` of the source becomes a call of a function that measures its
//! operands first. The source is parsed with the engine's own parser, and
//! only the operator and its operands' bounds are edited, so every other
//! byte, and every line, stays where it was. A chain of one operator is
//! nested calls, or one call when long (see [`MAX_NESTED_CHAIN`]).

use minijinja::machinery::ast::{BinOp, BinOpKind, CallArg, Expr, Spanned, Stmt};
use minijinja::syntax::SyntaxConfig;

/// The reserved prefix of the functions calls are rewritten to; a source
/// that names it is refused (it could shadow them).
pub(super) const PREFIX: &str = "__zephon_";

/// The functions that `+`, `~` and `*` become.
pub(super) const ADD: &str = "__zephon_add";
pub(super) const CONCAT: &str = "__zephon_concat";
pub(super) const MUL: &str = "__zephon_mul";

/// One edit of the source: at `at`, before the source byte there, in the
/// order of `rank` (closing calls, then the operator, then opening calls),
/// `text`; `skip` source bytes are replaced.
struct Edit {
    at: usize,
    rank: (u8, u64),
    text: &'static str,
    skip: usize,
}

/// `source` with every `+`, `~` and `*` turned into a call of [`ADD`],
/// [`CONCAT`] or [`MUL`]. A source the parser refuses is returned as it is
/// (compiling it then reports the error with its line).
pub(super) fn rewrite(source: &str, syntax: SyntaxConfig) -> String {
    let Ok(ast) = minijinja::machinery::parse(source, "chat_template", syntax) else {
        return source.to_owned();
    };
    let mut edits = Vec::new();
    stmt(&ast, source, &mut edits);
    if edits.is_empty() {
        return source.to_owned();
    }
    edits.sort_by_key(|e| (e.at, e.rank));
    let mut out = String::with_capacity(source.len() + edits.len() * 8);
    let mut pos = 0;
    for e in edits {
        out.push_str(&source[pos..e.at.max(pos)]);
        out.push_str(e.text);
        pos = pos.max(e.at + e.skip);
    }
    out.push_str(&source[pos..]);
    out
}

fn stmts(body: &[Stmt<'_>], src: &str, edits: &mut Vec<Edit>) {
    for s in body {
        stmt(s, src, edits);
    }
}

fn stmt(s: &Stmt<'_>, src: &str, edits: &mut Vec<Edit>) {
    let mut e = |x: &Expr<'_>| expr(x, src, edits);
    match s {
        Stmt::Template(t) => stmts(&t.children, src, edits),
        Stmt::EmitExpr(x) => e(&x.expr),
        Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
        Stmt::ForLoop(f) => {
            e(&f.target);
            e(&f.iter);
            if let Some(x) = &f.filter_expr {
                e(x);
            }
            stmts(&f.body, src, edits);
            stmts(&f.else_body, src, edits);
        }
        Stmt::IfCond(c) => {
            e(&c.expr);
            stmts(&c.true_body, src, edits);
            stmts(&c.false_body, src, edits);
        }
        Stmt::WithBlock(w) => {
            for (a, b) in &w.assignments {
                e(a);
                e(b);
            }
            stmts(&w.body, src, edits);
        }
        Stmt::Set(x) => {
            e(&x.target);
            e(&x.expr);
        }
        Stmt::SetBlock(x) => {
            e(&x.target);
            if let Some(f) = &x.filter {
                e(f);
            }
            stmts(&x.body, src, edits);
        }
        Stmt::AutoEscape(x) => {
            e(&x.enabled);
            stmts(&x.body, src, edits);
        }
        Stmt::FilterBlock(x) => {
            e(&x.filter);
            stmts(&x.body, src, edits);
        }
        Stmt::Block(x) => stmts(&x.body, src, edits),
        Stmt::Import(x) => {
            e(&x.expr);
            e(&x.name);
        }
        Stmt::FromImport(x) => {
            e(&x.expr);
            for (a, b) in &x.names {
                e(a);
                if let Some(b) = b {
                    e(b);
                }
            }
        }
        Stmt::Extends(x) => e(&x.name),
        Stmt::Include(x) => e(&x.name),
        Stmt::Macro(m) => {
            m.args.iter().chain(&m.defaults).for_each(e);
            stmts(&m.body, src, edits);
        }
        Stmt::CallBlock(c) => {
            e(&c.call.expr);
            args(&c.call.args, src, edits);
            let m = &c.macro_decl;
            m.args
                .iter()
                .chain(&m.defaults)
                .for_each(|x| expr(x, src, edits));
            stmts(&m.body, src, edits);
        }
        Stmt::Do(d) => {
            e(&d.call.expr);
            args(&d.call.args, src, edits);
        }
    }
}

fn args(list: &[CallArg<'_>], src: &str, edits: &mut Vec<Edit>) {
    for a in list {
        match a {
            CallArg::Pos(x)
            | CallArg::Kwarg(_, x)
            | CallArg::PosSplat(x)
            | CallArg::KwargSplat(x) => expr(x, src, edits),
        }
    }
}

/// The function and token of an operator that is rewritten.
fn rewritten(op: BinOpKind) -> Option<(&'static str, char)> {
    match op {
        BinOpKind::Add => Some((ADD, '+')),
        BinOpKind::Concat => Some((CONCAT, '~')),
        BinOpKind::Mul => Some((MUL, '*')),
        _ => None,
    }
}

/// The longest chain (`a + b + c`) of one operator rewritten as nested
/// calls, `__zephon_add(__zephon_add(a, b), c)`; a longer one becomes one
/// call `__zephon_add(a, b, c, ...)`. Nested calls fail as the operators
/// would (the first failing operation names its error); one call evaluates
/// all operands first, but nested as deep as a long chain they would pass
/// the parser's limit on nesting, which a chain does not count.
const MAX_NESTED_CHAIN: usize = 16;

/// The left operand of `b` when it continues `b`'s chain: the same
/// operator, not in parentheses.
fn chain_left<'x, 'a>(b: &'x BinOp<'a>, start: u32) -> Option<&'x Spanned<BinOp<'a>>> {
    match &b.left {
        Expr::BinOp(l)
            if rewritten(b.op).is_some()
                && std::mem::discriminant(&l.op) == std::mem::discriminant(&b.op)
                && l.span().start_offset == start =>
        {
            Some(l)
        }
        _ => None,
    }
}

/// Rewrites `b` (`in_chain`: `b` is the left operand of a chain rewritten
/// as one call).
fn binop(b: &Spanned<BinOp<'_>>, src: &str, edits: &mut Vec<Edit>, in_chain: bool) {
    let this = rewritten(b.op);
    let span = b.span();
    let flat = in_chain || {
        let mut len = 1;
        let mut link: &BinOp<'_> = b;
        while let Some(l) = chain_left(link, span.start_offset) {
            len += 1;
            link = l;
        }
        len > MAX_NESTED_CHAIN
    };
    match chain_left(b, span.start_offset) {
        Some(l) if flat => binop(l, src, edits, true),
        _ => expr(&b.left, src, edits),
    }
    expr(&b.right, src, edits);
    let Some((name, token)) = this else {
        return;
    };
    let (start, end) = (span.start_offset as usize, span.end_offset as usize);
    // The operator is the first of its kind after the left operand: only
    // closing parentheses and space lie between.
    let after_left = b.left.span().end_offset as usize;
    let Some(op) = src[after_left..end].find(token).map(|i| after_left + i) else {
        return;
    };
    edits.push(Edit {
        at: op,
        rank: (1, 0),
        text: ",",
        skip: 1,
    });
    if in_chain {
        return;
    }
    // At one offset: calls opened outermost first, closed innermost first.
    let size = (end - start) as u64;
    for text in [name, "("] {
        edits.push(Edit {
            at: start,
            rank: (2, u64::MAX - size),
            text,
            skip: 0,
        });
    }
    edits.push(Edit {
        at: end,
        rank: (0, size),
        text: ")",
        skip: 0,
    });
}

fn expr(x: &Expr<'_>, src: &str, edits: &mut Vec<Edit>) {
    match x {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            expr(&s.expr, src, edits);
            for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                expr(part, src, edits);
            }
        }
        Expr::UnaryOp(u) => expr(&u.expr, src, edits),
        Expr::BinOp(b) => binop(b, src, edits, false),
        Expr::Compare(c) => {
            expr(&c.expr, src, edits);
            for op in &c.ops {
                expr(&op.expr, src, edits);
            }
        }
        Expr::IfExpr(i) => {
            expr(&i.test_expr, src, edits);
            expr(&i.true_expr, src, edits);
            if let Some(f) = &i.false_expr {
                expr(f, src, edits);
            }
        }
        Expr::Filter(f) => {
            if let Some(x) = &f.expr {
                expr(x, src, edits);
            }
            args(&f.args, src, edits);
        }
        Expr::Test(t) => {
            expr(&t.expr, src, edits);
            args(&t.args, src, edits);
        }
        Expr::GetAttr(g) => expr(&g.expr, src, edits),
        Expr::GetItem(g) => {
            expr(&g.expr, src, edits);
            expr(&g.subscript_expr, src, edits);
        }
        Expr::Call(c) => {
            expr(&c.expr, src, edits);
            args(&c.args, src, edits);
        }
        Expr::List(l) => l.items.iter().for_each(|x| expr(x, src, edits)),
        Expr::Tuple(t) => t.items.iter().for_each(|x| expr(x, src, edits)),
        Expr::Map(m) => m
            .keys
            .iter()
            .chain(&m.values)
            .for_each(|x| expr(x, src, edits)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(src: &str) -> String {
        rewrite(src, SyntaxConfig::default())
    }

    #[test]
    fn operators_become_calls_with_every_other_byte_kept() {
        assert_eq!(rw("{{ a + b }}"), "{{ __zephon_add(a , b) }}");
        assert_eq!(
            rw("{{ (a) ~ (b|upper) * 2 }}"),
            "{{ __zephon_concat((a) , __zephon_mul((b|upper) , 2)) }}"
        );
        assert_eq!(rw("{{ a+b+c }}"), "{{ __zephon_add(__zephon_add(a,b),c) }}");
        // A long chain is one call; parentheses and other operators end it.
        let chain = vec!["a"; 20].join("+");
        let call = format!("__zephon_add({})", vec!["a"; 20].join(","));
        assert_eq!(
            rw(&format!("{{{{ {chain} }}}}")),
            format!("{{{{ {call} }}}}")
        );
        assert_eq!(
            rw(&format!("{{{{ ({chain})+c ~ d }}}}")),
            format!("{{{{ __zephon_add(({call}),__zephon_concat(c , d)) }}}}")
        );
        assert_eq!(
            rw("{% for x in y if x ~ 'é' %}\n{{ f(k=x*2)|join(x+'\n') }}{% endfor %}"),
            "{% for x in y if __zephon_concat(x , 'é') %}\n\
             {{ f(k=__zephon_mul(x,2))|join(__zephon_add(x,'\n')) }}{% endfor %}"
        );
        assert_eq!(rw("{{ a - b ** 2 }}x{% if %}"), "{{ a - b ** 2 }}x{% if %}");
        assert_eq!(rw("no tags"), "no tags");
    }
}
