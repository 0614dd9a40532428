//! In-process TypeScript → JavaScript transpilation built on the [oxc] crates.
//!
//! The pipeline is parse (`.ts`, ES module) → semantic analysis (scoping, early
//! errors, enum evaluation) → TypeScript transform → codegen. Only TypeScript
//! syntax is removed or lowered; the JavaScript that is left is printed as is
//! (ESNext: nothing is down-levelled), which suits Node.js 20 except for what
//! Node 20 lacks: `using` declarations and decorators (TS "experimental" or
//! TC39) pass through unchanged and fail there with a `SyntaxError`.
//!
//! Type-checking is not performed: like `tsc --isolatedModules` /
//! `transpileOnly`, code with type errors transpiles fine.
//!
//! [oxc]: https://oxc.rs

use std::{borrow::Cow, fmt, path::Path, thread};

use oxc_allocator::Allocator;
use oxc_ast::AstKind;
use oxc_ast_visit::Visit;
use oxc_codegen::{Codegen, CodegenOptions};
use oxc_diagnostics::OxcDiagnostic;
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{EnvOptions, Module, TransformOptions, Transformer};

#[cfg(test)]
mod tests;

/// Deepest bracket nesting (`(`, `[`, `{`) accepted, counted naively over
/// the raw text (brackets in strings and comments count too).
///
/// oxc's parser, semantic pass, transformer and codegen are recursive without
/// a depth guard of their own, and a stack overflow aborts the whole process,
/// so deeper inputs are rejected with [`TranspileError::TooDeep`]. Brackets
/// are the cheapest nesting to write and the most expensive in stack (up to
/// ~4.5 KiB per level in debug builds), hence the separate limit.
pub const MAX_NESTING: usize = 1_000;

/// Largest source accepted, in bytes (1 MiB); larger inputs are rejected with
/// [`TranspileError::TooLarge`].
///
/// Nesting without brackets (`!!!!x`, `a.b.c…`, `if (a) if (a) …`, `A<A<…>>`)
/// costs at most ~1.7 KiB of stack per source byte in debug builds (~0.8 KiB
/// in release), so bounding the size bounds the stack the worker needs.
pub const MAX_SOURCE_LEN: usize = 1024 * 1024;

/// Stack for the worker thread: 64 MiB plus 2 KiB per source byte (≈ 2 GiB at
/// [`MAX_SOURCE_LEN`]). This is reserved address space only; pages are
/// committed as the recursion touches them.
fn stack_size(source_len: usize) -> usize {
    (64 << 20) + source_len.saturating_mul(2 << 10)
}

/// One error reported by oxc, located in the source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Human-readable message, e.g. ``Expected `,` or `)` but found `;` ``.
    pub message: String,
    /// Optional hint from oxc on how to fix the error.
    pub help: Option<String>,
    /// 1-based line of the start of the diagnostic's primary label (first
    /// label if none is marked primary; `1` if the diagnostic has no label).
    pub line: usize,
    /// 1-based column, counted in Unicode scalar values (`char`s), of the same
    /// position.
    pub column: usize,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Why [`transpile`] / [`transpile_with_map`] produced no JavaScript.
///
/// Every variant displays as `"{file}:{line}:{column}: {message}"`, where
/// `file` is the `file_name` passed in and `line`/`column` are 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranspileError {
    /// The source has syntax or early (semantic) errors, or TypeScript that
    /// cannot become runnable ESM (`export =`, `import x = require()`,
    /// `export let`/`var` inside a namespace, nested ambient modules).
    /// `line`, `column` and `message` repeat the first entry of
    /// `diagnostics`, which holds every error of the failing pass in the order
    /// oxc reported them (never empty; oxc's parser often stops at the first).
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// The `file_name` given to the transpile call.
        file: String,
        /// 1-based line of the first error.
        line: usize,
        /// 1-based column of the first error.
        column: usize,
        /// Message of the first error.
        message: String,
        /// All errors, first one first.
        diagnostics: Vec<Diagnostic>,
    },
    /// Brackets are nested deeper than [`MAX_NESTING`]; the input was rejected
    /// before parsing, to keep the recursive oxc passes within their stack.
    /// `line`/`column` point at the bracket that crossed the limit.
    #[error("{file}:{line}:{column}: {message}")]
    TooDeep {
        /// The `file_name` given to the transpile call.
        file: String,
        /// 1-based line of the offending bracket.
        line: usize,
        /// 1-based column of the offending bracket.
        column: usize,
        /// Explanation including the limit.
        message: String,
    },
    /// The source is longer than [`MAX_SOURCE_LEN`] bytes; `line`/`column`
    /// are always `1`.
    #[error("{file}:{line}:{column}: {message}")]
    TooLarge {
        /// The `file_name` given to the transpile call.
        file: String,
        /// Always 1.
        line: usize,
        /// Always 1.
        column: usize,
        /// Explanation including the limit.
        message: String,
    },
    /// oxc panicked (a bug in oxc; the panic is contained in the worker
    /// thread), or the worker thread could not be spawned. `line`/`column`
    /// are always `1`.
    #[error("{file}:{line}:{column}: {message}")]
    Internal {
        /// The `file_name` given to the transpile call.
        file: String,
        /// Always 1.
        line: usize,
        /// Always 1.
        column: usize,
        /// `"internal transpiler error: "` followed by the panic or spawn
        /// error message.
        message: String,
    },
}

impl TranspileError {
    /// The (first) error's message, without the location.
    pub fn message(&self) -> &str {
        match self {
            Self::Syntax { message, .. } | Self::TooDeep { message, .. } | Self::TooLarge { message, .. } | Self::Internal { message, .. } => message,
        }
    }

    /// 1-based line of the (first) error in the caller's source.
    pub fn line(&self) -> Option<u32> {
        match self {
            Self::Syntax { line, .. } | Self::TooDeep { line, .. } | Self::TooLarge { line, .. } | Self::Internal { line, .. } => u32::try_from(*line).ok(),
        }
    }

    /// 1-based column (in characters) of the (first) error.
    pub fn column(&self) -> Option<u32> {
        match self {
            Self::Syntax { column, .. } | Self::TooDeep { column, .. } | Self::TooLarge { column, .. } | Self::Internal { column, .. } => {
                u32::try_from(*column).ok()
            }
        }
    }
}

/// Transpiles TypeScript `source` to JavaScript that runs as an ES module
/// under Node.js 20 (`node file.mjs`).
///
/// `source` is always parsed as a `.ts` ES module (top-level `await` allowed,
/// no JSX) whatever `file_name` says; `file_name` is only used in error
/// messages. Types, interfaces, type aliases, generics, `as`/`satisfies`/`!`,
/// `declare`, overloads, `import type`/`export type` and imports only used as
/// types are removed; enums (`const enum` too), namespaces and constructor
/// parameter properties become plain JavaScript. Imports whose bindings are
/// only used as types are dropped whole, as `tsc` does without
/// `verbatimModuleSyntax`; `import "x"` (no bindings) is always kept.
///
/// The output is re-printed from the AST: comments are kept but blank lines
/// are not, so line numbers drift; use [`transpile_with_map`] to map back.
///
/// # Errors
///
/// [`TranspileError::Syntax`] for any parse or early error,
/// [`TranspileError::TooDeep`] for nesting beyond [`MAX_NESTING`],
/// [`TranspileError::TooLarge`] beyond [`MAX_SOURCE_LEN`], and
/// [`TranspileError::Internal`] if oxc panics. Never panics itself.
pub fn transpile(source: &str, file_name: &str) -> Result<String, TranspileError> {
    run(source, file_name, false).map(|(code, _)| code)
}

/// Like [`transpile`], also returning a source map (v3, JSON text) whose
/// `sources` is `[file_name]`, or `None` if oxc produced none.
///
/// The map is not referenced from the code; to get mapped stack traces from
/// `node --enable-source-maps`, append
/// `//# sourceMappingURL=data:application/json;base64,<base64 of map>` or
/// write the map beside the `.mjs` file and reference it.
///
/// # Errors
///
/// Same as [`transpile`].
pub fn transpile_with_map(source: &str, file_name: &str) -> Result<(String, Option<String>), TranspileError> {
    run(source, file_name, true)
}

/// Runs the pipeline on a worker thread with a [`stack_size`] stack,
/// converting a panic into [`TranspileError::Internal`].
fn run(source: &str, file_name: &str, with_map: bool) -> Result<(String, Option<String>), TranspileError> {
    if source.len() > MAX_SOURCE_LEN {
        return Err(TranspileError::TooLarge {
            file: file_name.to_owned(),
            line: 1,
            column: 1,
            message: format!("source is {} bytes; the limit is {MAX_SOURCE_LEN}", source.len()),
        });
    }
    check_nesting(source, file_name)?;
    let internal =
        |message: String| TranspileError::Internal { file: file_name.to_owned(), line: 1, column: 1, message: format!("internal transpiler error: {message}") };
    thread::scope(|scope| {
        let worker = thread::Builder::new()
            .name("ts-transpile".into())
            .stack_size(stack_size(source.len()))
            .spawn_scoped(scope, || pipeline(source, file_name, with_map))
            .map_err(|e| internal(format!("cannot spawn worker thread: {e}")))?;
        worker.join().unwrap_or_else(|payload| {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_owned());
            Err(internal(msg))
        })
    })
}

/// Parse → semantic → transform → codegen, all in one arena.
fn pipeline(source: &str, file_name: &str, with_map: bool) -> Result<(String, Option<String>), TranspileError> {
    let allocator = Allocator::default();
    let source_type = SourceType::ts().with_module(true);
    let parsed = Parser::new(&allocator, source, source_type).parse();
    let mut program = parsed.program;
    if parsed.panicked || parsed.diagnostics.has_errors() {
        return Err(syntax_error(source, file_name, parsed.diagnostics.errors()));
    }

    let semantic = SemanticBuilder::new()
        .with_check_syntax_error(true)
        .with_enum_eval(true) // required by the enum transform
        .with_excess_capacity(2.0) // the transformer adds scopes and symbols
        .build(&program);
    if semantic.diagnostics.has_errors() {
        return Err(syntax_error(source, file_name, semantic.diagnostics.errors()));
    }
    let scoping = semantic.semantic.into_scoping();

    // TS only, no ES down-levelling; `Esm` makes `export =` and
    // `import x = require()` diagnostics instead of CommonJS output.
    let options = TransformOptions { env: EnvOptions { module: Module::Esm, ..EnvOptions::default() }, ..TransformOptions::default() };
    let transformed = Transformer::new(&allocator, Path::new(file_name), &options).build_with_scoping(scoping, &mut program);
    // Its warnings all mean output that cannot run as ESM (`export =`,
    // `import x = require()`, `export let` in a namespace, nested ambient
    // modules), so any diagnostic fails.
    if !transformed.diagnostics.is_empty() {
        return Err(syntax_error(source, file_name, &transformed.diagnostics));
    }

    let mut cost = IndentCost::default();
    cost.visit_program(&program);
    let indented = cost.total <= source.len().saturating_mul(32).saturating_add(1 << 20);
    let printed = Codegen::new()
        .with_options(CodegenOptions {
            source_map_path: with_map.then(|| file_name.into()),
            indent_width: if indented { 1 } else { 0 }, // one tab per level, or none
            ..CodegenOptions::default()
        })
        .build(&program);
    let map = printed.map.map(|m| m.to_json_string());
    Ok((printed.code, map))
}

/// Sum over all AST nodes of their depth: an upper bound on the indentation
/// bytes codegen would print (one tab per level per line).
///
/// Codegen output grows with depth × lines, i.e. quadratically in nesting
/// (10 000 × `if (a) `, 70 KB, prints 100 MB: nested `if`s get braces, and
/// dotted namespaces become nested IIFEs, which [`MAX_NESTING`] cannot see),
/// so [`pipeline`] prints without indentation when this sum is large.
#[derive(Default)]
struct IndentCost {
    depth: usize,
    total: usize,
}

impl<'a> Visit<'a> for IndentCost {
    fn enter_node(&mut self, _kind: AstKind<'a>) {
        self.depth += 1;
        self.total = self.total.saturating_add(self.depth);
    }

    fn leave_node(&mut self, _kind: AstKind<'a>) {
        self.depth -= 1;
    }
}

/// Builds [`TranspileError::Syntax`] from oxc's diagnostics.
fn syntax_error<'d>(source: &str, file_name: &str, diags: impl IntoIterator<Item = &'d OxcDiagnostic>) -> TranspileError {
    let mut diagnostics: Vec<Diagnostic> = diags
        .into_iter()
        .map(|d| {
            let offset = d.labels.iter().find(|l| l.primary()).or_else(|| d.labels.first()).map_or(0, |l| l.offset() as usize);
            let (line, column) = line_col(source, offset);
            Diagnostic { message: d.message.to_string(), help: d.help.as_ref().map(Cow::to_string), line, column }
        })
        .collect();
    if diagnostics.is_empty() {
        // Only reachable if oxc flags failure without an error diagnostic.
        diagnostics.push(Diagnostic { message: "syntax error".into(), help: None, line: 1, column: 1 });
    }
    let first = &diagnostics[0];
    TranspileError::Syntax { file: file_name.to_owned(), line: first.line, column: first.column, message: first.message.clone(), diagnostics }
}

/// 1-based (line, column in chars) of byte `offset`, clamped to the source.
/// Lines end at `\n`; a `\r` before it counts as part of the line.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(source.len());
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    let before = &source[..end];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

/// Rejects sources whose bracket nesting exceeds [`MAX_NESTING`].
///
/// Deliberately crude (brackets inside strings, comments and regexes are
/// counted too): it only has to bound recursion depth, and real code is
/// nowhere near the limit.
fn check_nesting(source: &str, file_name: &str) -> Result<(), TranspileError> {
    let mut depth = 0usize;
    for (i, b) in source.bytes().enumerate() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    let (line, column) = line_col(source, i);
                    return Err(TranspileError::TooDeep {
                        file: file_name.to_owned(),
                        line,
                        column,
                        message: format!("brackets nested deeper than {MAX_NESTING} levels; refusing to transpile"),
                    });
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}
