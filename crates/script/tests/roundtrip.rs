//! Property tests: any script the AST can express prints and parses back to the same ops; any output renders
//! and parses back to itself.

use proptest::prelude::*;
use vmspace_script::{Advice, Entry, Errno, MapFlags, MremapFlags, Op, Output, Prot, Script, Value};

/// Any PROT value: mostly the `rwx` forms, sometimes any raw bits.
fn prot() -> impl Strategy<Value = Prot> {
    prop_oneof![3 => (0u32..8).prop_map(Prot::from_bits_retain), 1 => any::<u32>().prop_map(Prot::from_bits_retain)]
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,9}" // "-" alone means "clear"
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), prot(), any::<u32>(), any::<bool>(), any::<u64>()).prop_map(
            |(addr, len, prot, bits, file, off)| {
                // Any raw bits, named or not.
                let mut flags = MapFlags::from_bits_retain(bits);
                // The parser ties the anon flag to the absence of fd=NAME.
                let file = if file { Some(("f".to_string(), off)) } else { None };
                flags.set(MapFlags::ANONYMOUS, file.is_none());
                Op::Mmap { addr, len, prot, flags, file }
            }
        ),
        (any::<u64>(), any::<u64>()).prop_map(|(addr, len)| Op::Munmap { addr, len }),
        (any::<u64>(), any::<u64>(), prot()).prop_map(|(addr, len, prot)| Op::Mprotect { addr, len, prot }),
        (any::<u64>(), any::<u64>(), any::<u64>(), prop_oneof![0u32..8, any::<u32>()], any::<u64>())
            .prop_map(|(addr, old_len, new_len, f, n)| {
                let flags = MremapFlags::from_bits_retain(f);
                let new_addr = flags.contains(MremapFlags::FIXED).then_some(n);
                Op::Mremap { addr, old_len, new_len, flags, new_addr }
            }),
        (any::<u64>(), any::<u64>(), prop_oneof![0i32..30, any::<i32>()])
            .prop_map(|(addr, len, a)| Op::Madvise { addr, len, advice: Advice::from_raw(a) }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(addr, len, write)| Op::Touch {
            addr,
            len,
            write
        }),
        (any::<u64>(), any::<u64>(), proptest::option::of(name())).prop_map(|(addr, len, name)| Op::Name {
            addr,
            len,
            name
        }),
        any::<u64>().prop_map(|addr| Op::Brk { addr }),
        Just(Op::Fork),
        Just(Op::Maps),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn script_print_parse(size in any::<u64>(), ops in proptest::collection::vec(op(), 0..40)) {
        let s = Script::from_ops(std::iter::once(Op::File { name: "f".into(), size }).chain(ops));
        let text = s.to_text();
        let back = Script::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, s);
    }

    #[test]
    fn output_render_parse(vals in proptest::collection::vec((1usize..1000, 0u8..4, any::<u64>(), 1i32..140), 0..30)) {
        let mut entries: Vec<Entry> = vals.into_iter().map(|(line, k, v, e)| Entry::Call {
            line,
            op: "mmap".into(),
            value: match k { 0 => Value::Addr(v), 1 => Value::Zero, 2 => Value::Err(Errno::from_raw(e)), _ => Value::Fault(v) },
        }).collect();
        entries.push(Entry::Maps(vec!["200000000000-200000001000 rw-p 00000000 00:00 0 ".into()]));
        let o = Output { entries };
        prop_assert_eq!(Output::parse(&o.render()).unwrap(), o);
    }
}
