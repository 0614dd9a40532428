use std::{
    process::Command,
    sync::atomic::{AtomicUsize, Ordering},
};

use super::*;

/// Transpiles `ts`, runs the result with `node file.mjs`, returns stdout.
fn run_node(ts: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let js = transpile(ts, "test.ts").unwrap_or_else(|e| panic!("{e}"));
    let path = std::env::temp_dir().join(format!("tsc-scratch-{}-{}.mjs", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, &js).unwrap();
    let out = Command::new("node").arg(&path).output().expect("node runs");
    std::fs::remove_file(&path).ok();
    assert!(out.status.success(), "node failed: {}\n--- js ---\n{js}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn syntax(result: Result<String, TranspileError>) -> (usize, usize, String, Vec<Diagnostic>) {
    match result {
        Err(TranspileError::Syntax { line, column, message, diagnostics, .. }) => (line, column, message, diagnostics),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn strips_annotations() {
    assert_eq!(run_node("const x: number = 6*7; console.log(x)"), "42\n");
}

#[test]
fn interfaces_and_generics() {
    let ts = r#"
interface Box<T> { value: T; map<U>(f: (v: T) => U): Box<U> }
type Pair<A, B = A> = [A, B];
function box<T>(value: T): Box<T> {
    return { value, map: (f) => box(f(value)) };
}
const p: Pair<number> = [1, 2];
const b = box<number>(20).map<string>((n) => String(n + p[0] + p[1]));
const s = b.value satisfies string;
console.log((s as unknown as string)!.length, b.value);
"#;
    assert_eq!(run_node(ts), "2 23\n");
    let js = transpile(ts, "t.ts").unwrap();
    assert!(!js.contains("interface") && !js.contains("satisfies"), "{js}");
}

#[test]
fn enums_become_code() {
    let ts = r#"
enum Color { Red, Green = 5, Blue }
enum Dir { Up = "UP", Down = "DOWN" }
const enum Flag { A = 1 << 0, B = 1 << 1 }
export enum Exported { X = 10 }
console.log(Color.Red, Color.Blue, Color[5], Dir.Down, Flag.A | Flag.B, Exported.X);
"#;
    assert_eq!(run_node(ts), "0 6 Green DOWN 3 10\n");
    assert!(!transpile(ts, "t.ts").unwrap().contains("enum "));
}

#[test]
fn namespaces_and_parameter_properties() {
    let ts = r#"
namespace Geo { export const unit = "m"; export namespace Inner { export const k = 2; } }
class Point {
    static count: number = 0;
    constructor(public readonly x: number, private y: number, protected z?: number) { Point.count++; }
    norm1(): number { return this.x + this.y; }
}
declare const ambient: string;
abstract class Shape { abstract area(): number; }
function over(a: string): string;
function over(a: number): number;
function over(a: any): any { return a; }
console.log(new Point(3, 4).norm1(), Point.count, Geo.unit, Geo.Inner.k, over(1));
"#;
    assert_eq!(run_node(ts), "7 1 m 2 1\n");
}

#[test]
fn top_level_await_preserved() {
    let ts = "const v: number = await Promise.resolve(7);\nconsole.log(v);";
    assert!(transpile(ts, "t.ts").unwrap().contains("await"));
    assert_eq!(run_node(ts), "7\n");
}

#[test]
fn value_imports_preserved() {
    let ts = r#"
import { readFile } from "node:fs/promises";
const text: string = await readFile(new URL(import.meta.url), "utf8");
console.log(typeof text, text.length > 0);
"#;
    let js = transpile(ts, "t.ts").unwrap();
    assert!(js.contains(r#"import { readFile } from "node:fs/promises";"#), "{js}");
    assert_eq!(run_node(ts), "string true\n");
}

#[test]
fn type_imports_removed() {
    // If any of these survived, node would fail to resolve the module.
    let ts = r#"
import type { Missing } from "./does-not-exist.js";
import { type AlsoMissing } from "./does-not-exist-either.js";
import { OnlyAType } from "./not-there.js";
export type { Missing };
export type Local = Missing | AlsoMissing | OnlyAType;
const m: Missing | null = null;
console.log(m);
"#;
    let js = transpile(ts, "t.ts").unwrap();
    assert!(!js.contains("import"), "{js}");
    assert_eq!(run_node(ts), "null\n");
}

#[test]
fn syntax_error_location() {
    let src = "const a = 1;\nconst b: string = 'x';\nconst c = ;\n";
    let err = transpile(src, "bad.ts").unwrap_err();
    let shown = err.to_string();
    let (line, column, message, diagnostics) = syntax(Err(err));
    assert_eq!((line, column), (3, 11));
    assert_eq!(shown, format!("bad.ts:3:11: {message}"));
    assert_eq!(diagnostics[0].line, 3);
}

#[test]
fn column_counts_chars_not_bytes() {
    let (line, column, ..) = syntax(transpile("const s = 'é✓';\nlet ü = ;", "u.ts"));
    assert_eq!((line, column), (2, 9));
}

#[test]
fn semantic_errors_are_reported() {
    let (line, column, message, _) = syntax(transpile("let a = 1;\nlet a = 2;", "dup.ts"));
    assert_eq!((line, column), (1, 5), "{message}");
}

#[test]
fn empty_input() {
    assert_eq!(transpile("", "empty.ts").unwrap(), "");
    assert_eq!(run_node(""), "");
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let garbage = String::from_utf8_lossy(&bytes);
    let (_, _, _, diagnostics) = syntax(transpile(&garbage, "bin.ts"));
    assert!(!diagnostics.is_empty());
    for src in ["\0", "}", "<<<>>>", "class { ", "enum", "@", "`${", "/*", "a?.b!.c<"] {
        assert!(transpile(src, "g.ts").is_err(), "{src:?} should not transpile");
    }
}

#[test]
fn deep_brackets_are_rejected() {
    let src = format!("const x = {}1{};", "(".repeat(10_000), ")".repeat(10_000));
    let err = transpile(&src, "deep.ts").unwrap_err();
    assert!(matches!(err, TranspileError::TooDeep { line: 1, column: 1011, .. }), "{err}");
    assert!(err.to_string().starts_with("deep.ts:1:1011: "), "{err}");

    let ok = format!("const x = {}1{};", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
    transpile(&ok, "ok.ts").unwrap();
}

#[test]
fn deep_chains_without_brackets_fit_the_stack() {
    for src in [format!("const x = {}1;", "!".repeat(100_000)), format!("const x = a{};", ".b".repeat(50_000)), format!("{}1;", "if (a) ".repeat(20_000))] {
        transpile(&src, "chain.ts").unwrap();
    }
}

#[test]
fn oversized_input_is_rejected() {
    let src = " ".repeat(MAX_SOURCE_LEN + 1);
    let err = transpile(&src, "big.ts").unwrap_err();
    assert!(matches!(err, TranspileError::TooLarge { .. }), "{err}");
}

#[test]
fn source_map() {
    let (code, map) = transpile_with_map("const x: number = 1;\nconsole.log(x);\n", "m.ts").unwrap();
    assert!(code.starts_with("const x = 1;"), "{code}");
    let map = map.expect("a source map");
    assert!(map.contains(r#""sources":["m.ts"]"#) && map.contains("mappings"), "{map}");
}

#[test]
fn pathological_nesting_is_printed_flat() {
    // Indented, these would print ~100 MB (nested `if`s get braces) and
    // ~40 MB (dotted namespaces become nested IIFEs).
    let ifs = format!("{}console.log('deep');", "if (true) ".repeat(10_000));
    let ns = format!("namespace {} {{ export const x = 1; }}", vec!["A"; 3_000].join("."));
    for src in [ifs, ns] {
        let js = transpile(&src, "flat.ts").unwrap();
        assert!(js.len() < 100 * src.len() && !js.contains('\t'), "{} bytes", js.len());
    }
    // V8 itself overflows on ~2 000 nested `if`s, so run a shallower one.
    assert_eq!(run_node(&format!("{}console.log('deep');", "if (true) ".repeat(500))), "deep\n");
}

#[test]
fn normal_code_is_indented() {
    let js = transpile("function f(a: number) {\n  if (a) {\n    return 1;\n  }\n}", "i.ts").unwrap();
    assert!(js.contains("\n\tif (a) {\n\t\treturn 1;\n\t}\n"), "{js}");
}

#[test]
fn commonjs_only_syntax_is_an_error() {
    let (line, column, message, _) = syntax(transpile("const a = 1;\nexport = a;", "cjs.ts"));
    assert_eq!((line, column), (2, 1), "{message}");
    let (line, _, message, _) = syntax(transpile("import fs = require('fs');\nfs;", "cjs.ts"));
    assert_eq!(line, 1, "{message}");
}

#[test]
fn unsupported_namespace_exports_are_an_error() {
    let (line, column, message, _) = syntax(transpile("namespace N {\n  export let x = 1;\n}", "ns.ts"));
    assert_eq!((line, column), (2, 14), "{message}");
}
