//! Merges the filters libseccomp exports (see `mod.rs`) into one classic BPF program that
//! decides exactly as the kernel decides with all of them loaded, and is shorter: a binary
//! search over ranges of system call numbers with one answer each, instead of one comparison
//! per listed call and one program per filter. Used by `build.rs` (which embeds the result) and
//! by the unit tests, which check the equivalence on thousands of call numbers and on the
//! arguments the rules compare (`tests.rs`).
//!
//! Why: the kernel converts, JIT-compiles and then runs a filter once per call number when it
//! is loaded (`bpf_prepare_filter`, `seccomp_cache_prepare`), and every sandbox loads it before
//! its program starts: the two libseccomp programs (187 + 461 instructions) took ~0.11 ms to
//! load on this machine kind, in two `seccomp(2)` calls.
//!
//! How: a filter's answer depends on the call number only through comparisons of it with
//! constants (`jeq`, `jgt`, `jge`; anything else is refused here), so it is constant on each
//! interval between those constants: within one, every comparison of the number on the path
//! taken comes out the same. Each interval's answer is read by running the program ([`run`]) on
//! the interval's first number, until no run finds a new constant. The architecture is checked
//! once, by libseccomp's prologue ([`prologue`]: any other architecture gets its one answer).
//! Where a filter also reads the arguments or the instruction pointer, its answer is not a
//! constant: the merged program jumps to a verbatim copy of that filter (or of a smaller one
//! that answers the same for those calls: checked when merging, and by the tests), whose
//! relative jumps are unchanged by the copy. This file may use only `std` (a build script
//! includes it).

/// One classic BPF instruction (`struct sock_filter`, linux/filter.h): 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u16,
    pub(crate) jt: u8,
    pub(crate) jf: u8,
    pub(crate) k: u32,
}

// The opcodes libseccomp emits, and the only ones accepted here (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

/// `SECCOMP_RET_ACTION_FULL` (linux/seccomp.h): the action part of an answer.
const ACTION_FULL: u32 = 0xffff_0000;
/// `SECCOMP_RET_ALLOW`.
pub(crate) const ALLOW: u32 = 0x7fff_0000;
/// Offsets in `struct seccomp_data`: `nr` (int), `arch` (u32), then `instruction_pointer` and the
/// six 64-bit `args` from byte 16.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;
/// `sizeof(struct seccomp_data)`.
const DATA_LEN: u32 = 64;

/// Decodes a program exported as bytes (native byte order, 8 bytes an instruction).
/// Errors: a length that is not a whole number of instructions.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Insn>, String> {
    if !bytes.len().is_multiple_of(8) {
        return Err(format!("{} bytes is not a whole number of BPF instructions", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| Insn { code: u16::from_ne_bytes([c[0], c[1]]), jt: c[2], jf: c[3], k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]) })
        .collect())
}

/// The bytes of `program`, as `seccomp(2)` takes them.
pub(crate) fn encode(program: &[Insn]) -> Vec<u8> {
    program.iter().flat_map(|i| [&i.code.to_ne_bytes()[..], &[i.jt, i.jf], &i.k.to_ne_bytes()[..]].concat()).collect()
}

/// What a filter is run on (`struct seccomp_data`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Data {
    pub(crate) nr: u32,
    pub(crate) arch: u32,
    pub(crate) args: [u64; 6],
}

impl Data {
    /// The 32-bit word at byte `offset` of `struct seccomp_data` (little-endian halves of the
    /// 64-bit fields, as on x86-64; the instruction pointer reads as 0).
    fn word(&self, offset: u32) -> Option<u32> {
        match offset {
            NR => Some(self.nr),
            ARCH => Some(self.arch),
            8 | 12 => Some(0),
            o if (ARGS..DATA_LEN).contains(&o) && o.is_multiple_of(4) => {
                let bytes = self.args[usize::try_from((o - ARGS) / 8).ok()?].to_le_bytes();
                // The low half first (little-endian).
                let half = if (o - ARGS).is_multiple_of(8) { &bytes[..4] } else { &bytes[4..] };
                Some(u32::from_le_bytes(half.try_into().ok()?))
            }
            _ => None,
        }
    }
}

/// A run of a filter: its answer, whether it read any argument or the instruction pointer (so
/// that its answer may differ for other values of them), and the constants the call number was
/// compared with on the way.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) answer: u32,
    pub(crate) read_input: bool,
    nr_constants: Vec<u32>,
}

/// Runs `program` on `data` as the kernel would (the opcodes libseccomp emits only).
/// Errors: another opcode, a jump out of the program, a load outside `seccomp_data`, or a
/// comparison of the call number other than `jeq`, `jgt`, `jge` against a constant.
pub(crate) fn run(program: &[Insn], data: &Data) -> Result<Run, String> {
    let mut out = Run::default();
    let (mut a, mut a_is_nr, mut pc) = (0u32, false, 0usize);
    loop {
        let i = *program.get(pc).ok_or_else(|| format!("the program runs past its end at {pc}"))?;
        pc += 1;
        match i.code {
            LD_W_ABS => {
                a = data.word(i.k).ok_or_else(|| format!("a load at offset {} outside seccomp_data", i.k))?;
                a_is_nr = i.k == NR;
                out.read_input |= i.k > ARCH;
            }
            // A masked call number would not be a threshold comparison.
            ALU_AND_K if a_is_nr => return Err(format!("the call number is masked at {}", pc - 1)),
            ALU_AND_K => a &= i.k,
            JMP_JA => pc += i.k as usize,
            JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K => {
                if a_is_nr {
                    out.nr_constants.push(i.k);
                }
                let taken = match i.code {
                    JMP_JEQ_K => a == i.k,
                    JMP_JGT_K => a > i.k,
                    _ => a >= i.k,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            RET_K => {
                out.answer = i.k;
                return Ok(out);
            }
            code => return Err(format!("opcode {code:#06x} at {} is not one this merge knows", pc - 1)),
        }
    }
}

/// The kernel's answer when `last` (installed last, run first) and `first` are both loaded:
/// the more restrictive action, compared as signed 32-bit numbers, and of two equal ones the
/// answer of the filter run first (`seccomp_run_filters`, kernel/seccomp.c).
pub(crate) fn combine(last: u32, first: u32) -> u32 {
    let action = |v: u32| (v & ACTION_FULL) as i32;
    let mut answer = ALLOW;
    for v in [last, first] {
        if action(v) < action(answer) {
            answer = v;
        }
    }
    answer
}

/// Where the merged program sends a range of call numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// This answer, whatever the arguments.
    Answer(u32),
    /// The answer of the appended program with this index.
    Program(usize),
}

/// One filter's answer on one call number: a constant, or one that depends on the arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Constant(u32),
    Depends,
}

/// `program`'s answer for call number `nr` on the native `arch` (arguments all zero; a read of
/// an argument or of the instruction pointer makes it [`Answer::Depends`]), with the constants
/// `nr` was compared with.
fn answer_at(program: &[Insn], arch: u32, nr: u32) -> Result<(Answer, Vec<u32>), String> {
    let r = run(program, &Data { nr, arch, args: [0; 6] })?;
    Ok((if r.read_input { Answer::Depends } else { Answer::Constant(r.answer) }, r.nr_constants))
}

/// Every answer a `ret` of `program` can give.
fn answers(program: &[Insn]) -> Vec<u32> {
    program.iter().filter(|i| i.code == RET_K).map(|i| i.k).collect()
}

/// The first call numbers of the intervals on which `programs` all answer the same way: 0, and
/// the edges of every comparison of the call number found while running each program on each
/// interval found so far (a fixed point; the comparisons depend on the path taken).
fn interval_starts(programs: &[&[Insn]], arch: u32) -> Result<Vec<u32>, String> {
    let mut starts = std::collections::BTreeSet::from([0u32]);
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let todo: Vec<u32> = starts.difference(&seen).copied().collect();
        if todo.is_empty() {
            return Ok(starts.into_iter().collect());
        }
        for nr in todo {
            seen.insert(nr);
            for p in programs {
                for k in answer_at(p, arch, nr)?.1 {
                    // `nr == k`, `nr > k`, `nr >= k` change at k and k + 1.
                    starts.insert(k);
                    if let Some(next) = k.checked_add(1) {
                        starts.insert(next);
                    }
                }
            }
        }
    }
}

/// The architecture (`AUDIT_ARCH_*`) `program` admits, and its answer for every other one, read
/// from libseccomp's prologue: `ld arch; jeq ARCH` whose false branch is a `ret`, and no other
/// load of the architecture anywhere in the program (so that no other architecture can get any
/// other answer).
/// Errors: any other shape.
pub(crate) fn prologue(program: &[Insn]) -> Result<(u32, u32), String> {
    let shape = || format!("the program does not begin with libseccomp's architecture check: {:?}", program.get(..2));
    let (load, check) = match program {
        [load, check, ..] => (load, check),
        _ => return Err(shape()),
    };
    if *load != (Insn { code: LD_W_ABS, jt: 0, jf: 0, k: ARCH }) || check.code != JMP_JEQ_K || check.jt != 0 {
        return Err(shape());
    }
    let other = program.get(2 + usize::from(check.jf)).filter(|i| i.code == RET_K).ok_or_else(shape)?;
    if program[1..].iter().any(|i| i.code == LD_W_ABS && i.k == ARCH) {
        return Err("the program loads the architecture again past its prologue".into());
    }
    Ok((check.k, other.k))
}

/// Argument vectors that take a filter down each of its comparisons: zero, and every constant
/// in `program` (and its neighbours) in either half of each argument, the others zero.
fn probe_arguments(program: &[Insn]) -> Vec<[u64; 6]> {
    let mut values = std::collections::BTreeSet::from([0u64, u64::MAX]);
    for i in program.iter().filter(|i| matches!(i.code, JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K | ALU_AND_K)) {
        for k in [i.k.wrapping_sub(1), i.k, i.k.wrapping_add(1)].map(u64::from) {
            values.extend([k, k << 32]);
        }
    }
    let mut vectors = vec![[0; 6]];
    for v in values {
        for position in 0..6 {
            let mut args = [0; 6];
            args[position] = v;
            vectors.push(args);
        }
    }
    vectors
}

/// Merges `last` (the filter installed last, so run first) and `first` into one program that
/// answers as the kernel does with both loaded ([`combine`]), for the architecture `last`
/// checks for in its [`prologue`] (`first` must check for the same one); any other architecture
/// gets the prologues' answers, combined.
/// `stand_in`, when given, is appended instead of `last` itself to answer the calls on which
/// `last` reads its arguments: a smaller program that must answer as `last` for those calls,
/// which is checked here on [`probe_arguments`] of both (the caller's tests check more); `first`
/// is appended whole for the calls on which it reads them. Appended programs are copied
/// verbatim, their jumps being relative.
/// Errors: a program [`run`] refuses or whose [`prologue`] differs; a call on which both read
/// their arguments, or on which one does and the other's constant answer could not simply be
/// kept or left out; a stand-in that answers otherwise; a jump the merged layout cannot encode
/// (over 255 instructions).
pub(crate) fn merge(last: &[Insn], first: &[Insn], stand_in: Option<&[Insn]>) -> Result<Vec<Insn>, String> {
    let (arch, last_foreign) = prologue(last)?;
    let (first_arch, first_foreign) = prologue(first)?;
    if first_arch != arch {
        return Err("the two programs check for different architectures".into());
    }
    // Any other architecture: the prologues' answers (libseccomp's bad-arch action).
    let foreign_answer = combine(last_foreign, first_foreign);
    let last_block = match stand_in {
        Some(s) => {
            if prologue(s)?.0 != arch {
                return Err("the stand-in checks for another architecture".into());
            }
            s
        }
        None => last,
    };
    let mut ranges: Vec<(u32, Target)> = Vec::new();
    for nr in interval_starts(&[last, first], arch)? {
        let target = match (answer_at(last, arch, nr)?.0, answer_at(first, arch, nr)?.0) {
            (Answer::Constant(a), Answer::Constant(b)) => Target::Answer(combine(a, b)),
            (Answer::Depends, Answer::Constant(b)) if b == ALLOW => {
                if let Some(s) = stand_in {
                    let probes = probe_arguments(last).into_iter().chain(probe_arguments(s));
                    for args in probes {
                        let d = Data { nr, arch, args };
                        if run(last, &d)?.answer != run(s, &d)?.answer {
                            return Err(format!("call {nr}: the stand-in answers otherwise for {args:x?}"));
                        }
                    }
                }
                Target::Program(0)
            }
            (Answer::Constant(a), Answer::Depends) if a == ALLOW => Target::Program(1),
            // `first`'s answers never win over `last`'s constant one: it stands.
            (Answer::Constant(a), Answer::Depends) if answers(first).iter().all(|&b| combine(a, b) == a) => Target::Answer(a),
            other => return Err(format!("call {nr}: answers {other:?} cannot be merged")),
        };
        if ranges.last().is_none_or(|r| r.1 != target) {
            ranges.push((nr, target));
        }
    }
    let blocks: [&[Insn]; 2] = [last_block, first];
    Layout::emit(arch, foreign_answer, &ranges, &blocks)
}

/// A place in the merged program, resolved once everything is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    /// The comparison node with this index.
    Node(usize),
    /// The leaf for this target.
    Leaf(Target),
}

/// The merged program's layout: the architecture check, the search tree's comparisons
/// (`jge`), one leaf per target (`ret`, or `ja` to an appended program), the programs.
struct Layout {
    /// Comparison nodes in emission order: `(k, label if nr >= k, label if not)`.
    nodes: Vec<(u32, Label, Label)>,
}

impl Layout {
    /// A balanced search over `ranges` (each `(first nr, target)`, sorted by nr); returns the
    /// label of its root. Nodes are pushed before their children, so every jump goes forward.
    fn tree(&mut self, ranges: &[(u32, Target)]) -> Label {
        if ranges.len() == 1 {
            return Label::Leaf(ranges[0].1);
        }
        let mid = ranges.len() / 2;
        let index = self.nodes.len();
        self.nodes.push((ranges[mid].0, Label::Node(0), Label::Node(0)));
        let below = self.tree(&ranges[..mid]);
        let above = self.tree(&ranges[mid..]);
        self.nodes[index] = (ranges[mid].0, above, below);
        Label::Node(index)
    }

    fn emit(arch: u32, foreign_answer: u32, ranges: &[(u32, Target)], blocks: &[&[Insn]; 2]) -> Result<Vec<Insn>, String> {
        let mut layout = Layout { nodes: Vec::new() };
        let root = layout.tree(ranges);
        let mut leaves: Vec<Target> = Vec::new();
        for r in ranges {
            if !leaves.contains(&r.1) {
                leaves.push(r.1);
            }
        }
        // ld arch; jeq arch (else the foreign answer's ret, after the leaves); ld nr; the root.
        const HEAD: usize = 3;
        let node_at = |i: usize| HEAD + i;
        let leaf_base = HEAD + layout.nodes.len();
        let foreign_at = leaf_base + leaves.len();
        let mut block_at = [0usize; 2];
        let mut next = foreign_at + 1;
        for (i, b) in blocks.iter().enumerate() {
            if leaves.contains(&Target::Program(i)) {
                block_at[i] = next;
                next += b.len();
            }
        }
        let resolve = |l: Label| match l {
            Label::Node(i) => node_at(i),
            Label::Leaf(t) => leaf_base + leaves.iter().position(|x| *x == t).expect("every leaf is listed"),
        };
        let offset = |from: usize, to: usize| -> Result<u8, String> {
            u8::try_from(to - (from + 1)).map_err(|_| format!("a jump from {from} to {to} is longer than 255 instructions"))
        };
        let mut out = Vec::with_capacity(next);
        out.push(Insn { code: LD_W_ABS, jt: 0, jf: 0, k: ARCH });
        out.push(Insn { code: JMP_JEQ_K, jt: 0, jf: offset(1, foreign_at)?, k: arch });
        out.push(Insn { code: LD_W_ABS, jt: 0, jf: 0, k: NR });
        if let Label::Leaf(_) = root {
            return Err("one answer for every call: nothing to search".into());
        }
        for (i, &(k, above, below)) in layout.nodes.iter().enumerate() {
            let at = node_at(i);
            out.push(Insn { code: JMP_JGE_K, jt: offset(at, resolve(above))?, jf: offset(at, resolve(below))?, k });
        }
        for (i, leaf) in leaves.iter().enumerate() {
            out.push(match *leaf {
                Target::Answer(v) => Insn { code: RET_K, jt: 0, jf: 0, k: v },
                Target::Program(b) => Insn { code: JMP_JA, jt: 0, jf: 0, k: u32::try_from(block_at[b] - (leaf_base + i + 1)).map_err(|e| e.to_string())? },
            });
        }
        out.push(Insn { code: RET_K, jt: 0, jf: 0, k: foreign_answer });
        for (i, b) in blocks.iter().enumerate() {
            if leaves.contains(&Target::Program(i)) {
                out.extend_from_slice(b);
            }
        }
        debug_assert_eq!(out.len(), next);
        if out.len() > 4096 {
            return Err(format!("{} instructions: the kernel takes at most 4096", out.len()));
        }
        Ok(out)
    }
}
