//! Lexing and parsing details that LANGUAGE.md settles: literals, precedence and
//! associativity, tuple fields, struct literals in conditions, and error recovery.

// Test code: a failure should stop the test where it happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcir_syntax::ast::*;
use mcir_syntax::parse;

/// The expression of `return e;` in `fn f() { return e; }`, as an s-expression.
fn sexpr(src: &str) -> String {
    let text = format!("fn f() {{ return {src}; }}");
    let parsed = parse(&text);
    assert!(parsed.diagnostics.is_empty(), "{src}: {:?}", parsed.diagnostics);
    let Item::Fn(f) = &parsed.program.items[0] else { panic!() };
    let StmtKind::Return(Some(e)) = &f.body.stmts[0].kind else { panic!() };
    show(e)
}

fn show(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Float(x) => format!("{x:?}"),
        ExprKind::Int(i) => i.to_string(),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Name(n) => n.clone(),
        ExprKind::Unary(op, a) => format!("({op:?} {})", show(a)),
        ExprKind::Binary(op, a, b) => format!("({} {} {})", op.symbol(), show(a), show(b)),
        ExprKind::Call(f, args) => {
            format!("(call {} {})", show(f), args.iter().map(show).collect::<Vec<_>>().join(" "))
        }
        ExprKind::Index(a, idx) => {
            format!("(index {} {})", show(a), idx.iter().map(show).collect::<Vec<_>>().join(" "))
        }
        ExprKind::Field(a, f) => format!("(. {} {})", show(a), f.name),
        ExprKind::TupleField(a, i, _) => format!("(. {} {i})", show(a)),
        ExprKind::Tuple(items) => format!("(tuple {})", items.iter().map(show).collect::<Vec<_>>().join(" ")),
        ExprKind::Array(items) => format!("[{}]", items.iter().map(show).collect::<Vec<_>>().join(" ")),
        ExprKind::StructLit(n, _) => format!("(struct {})", n.name),
        ExprKind::RefNew(a) => format!("(ref {})", show(a)),
        ExprKind::Closure(c) => {
            let ps: Vec<&str> = c.params.iter().map(|(n, _)| n.name.as_str()).collect();
            match &c.body {
                ClosureBody::Expr(b) => format!("(closure ({}) {})", ps.join(" "), show(b)),
                ClosureBody::Block(b) => {
                    format!("(closure ({}) {{{} statements}})", ps.join(" "), b.stmts.len())
                }
            }
        }
        ExprKind::Error => "ERROR".into(),
    }
}

fn errors(src: &str) -> Vec<String> {
    parse(src).diagnostics.into_iter().map(|d| d.message).collect()
}

#[test]
fn closures_take_everything_to_their_right() {
    assert_eq!(sexpr("|x: f64| x * 2.0 + y"), "(closure (x) (+ (* x 2.0) y))");
    assert_eq!(sexpr("|| 1.0"), "(closure () 1.0)");
    assert_eq!(sexpr("a || b"), "(|| a b)");
    assert_eq!(sexpr("f(|x: f64, y: f64[]| x, 3.0)"), "(call f (closure (x y) x) 3.0)");
    assert_eq!(sexpr("|x: f64| { return x; }"), "(closure (x) {1 statements})");
    assert_eq!(sexpr("(|x: f64| x)(2.0)"), "(call (closure (x) x) 2.0)");
    assert_eq!(sexpr("|g: fn(f64) -> f64| g(1.0)"), "(closure (g) (call g 1.0))");
}

#[test]
fn rules_parse_and_say_what_forms_exist() {
    let ok = parse("rule zero f;\nrule reverse f(x: f64) -> f64 { return (x, |d: f64| d); }\n");
    assert!(ok.diagnostics.is_empty(), "{:?}", ok.diagnostics);
    assert_eq!(ok.program.items.len(), 2);
    assert!(errors("rule sideways f(x: f64) -> f64 { return x; }")[0].contains("rule reverse"));
    assert!(errors("rule reverse f;")[0].contains("rule zero f;"));
}

#[test]
fn precedence_and_associativity() {
    assert_eq!(sexpr("-x ** 2"), "(Neg (** x 2))");
    assert_eq!(sexpr("a ** b ** c"), "(** a (** b c))");
    assert_eq!(sexpr("x ** -2"), "(** x (Neg 2))");
    assert_eq!(sexpr("a + b * c - d"), "(- (+ a (* b c)) d)");
    assert_eq!(sexpr("a || b && c == d"), "(|| a (&& b (== c d)))");
    assert_eq!(sexpr("*r[i]"), "(Deref (index r i))");
    assert_eq!(sexpr("(*r)[i]"), "(index (Deref r) i)");
    assert_eq!(sexpr("!a && b"), "(&& (Not a) b)");
    assert_eq!(sexpr("a % b / c"), "(/ (% a b) c)");
}

#[test]
fn literals() {
    assert_eq!(sexpr("1_000.5"), "1000.5");
    assert_eq!(sexpr("2.5E+10"), "25000000000.0");
    assert_eq!(sexpr("1e-3"), "0.001");
    assert_eq!(sexpr("3"), "3");
    assert_eq!(sexpr("[[1.0, 2.0], [3.0, 4.0]]"), "[[1.0 2.0] [3.0 4.0]]");
    assert_eq!(sexpr("(1.0,)"), "(tuple 1.0)");
    assert!(!errors("fn f() { return 1.; }").is_empty());
    assert!(!errors("fn f() { return .5; }").is_empty());
    // `1.e3` is the field `e3` of `1`: the type checker rejects it (tests/reject).
    assert_eq!(sexpr("1.e3"), "(. 1 e3)");
    assert!(errors("fn f() { return 99999999999999999999; }").iter().any(|m| m.contains("does not fit")));
    assert!(errors("fn f() { /* never closed }").iter().any(|m| m.contains("never closed")));
}

#[test]
fn nested_tuple_fields() {
    assert_eq!(sexpr("t.0.1"), "(. (. t 0) 1)");
    assert_eq!(sexpr("t.1.0.2"), "(. (. (. t 1) 0) 2)");
    assert_eq!(sexpr("p.x.0"), "(. (. p x) 0)");
}

#[test]
fn struct_literals_need_parentheses_in_conditions() {
    assert!(!errors("fn f() { if Flag { on: true }.on { } }").is_empty());
    assert!(errors("fn f() { if (Flag { on: true }).on { } }").is_empty());
    assert!(errors("fn f() { let p = Flag { on: true }; }").is_empty());
    assert!(errors("fn f() { for i in 0..n + 1 { } }").is_empty());
}

#[test]
fn comparisons_do_not_chain() {
    assert!(errors("fn f() { return a < b < c; }").iter().any(|m| m.contains("do not chain")));
}

#[test]
fn several_errors_are_reported() {
    let src = "fn f() {\n let = 1;\n let y = ;\n let z = 2 $ 3;\n}\n";
    assert!(errors(src).len() >= 3, "{:?}", errors(src));
}

#[test]
fn keywords_are_reserved() {
    assert!(!errors("fn f() { let rule = 1; }").is_empty());
    assert!(!errors("fn while() { }").is_empty());
}
