//! Property tests: any script the AST can express prints and parses back to the same ops (and the printed
//! text is a fixed point); any output renders and parses back to itself.

use proptest::prelude::*;
use vmspace_script::{Advice, Entry, Errno, Fd, MapFlags, MremapFlags, Op, Output, Prot, Script, Value};

/// Any PROT value: mostly the `rwx` forms, sometimes with the named bits, sometimes any raw bits.
fn prot() -> impl Strategy<Value = Prot> {
    prop_oneof![
        3 => (0u32..8).prop_map(Prot::from_bits_retain),
        1 => (0u32..8, prop_oneof![Just(0x8u32), Just(0x0100_0000), Just(0x0200_0000), Just(0x0300_0008)])
            .prop_map(|(a, b)| Prot::from_bits_retain(a | b)),
        1 => any::<u32>().prop_map(Prot::from_bits_retain),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,9}" // "-" alone means "clear"
}

/// A file NAME: no leading digit or '-'. Mostly the declared `f`, sometimes undeclared ones.
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => Just("f".to_string()), 1 => "[a-zA-Z_][a-zA-Z0-9_.-]{0,9}"]
}

fn fd() -> impl Strategy<Value = Fd> {
    prop_oneof![4 => file_name().prop_map(Fd::Name), 1 => Just(Fd::MinusOne)]
}

/// mmap flags: any raw bits, or combinations of the named values (multi-bit names included).
fn mmap_flags() -> impl Strategy<Value = u32> {
    let named: Vec<u32> = vmspace_script::MMAP_FLAG_NAMES.iter().map(|(f, _)| f.bits()).collect();
    prop_oneof![
        any::<u32>(),
        proptest::collection::vec(proptest::sample::select(named), 0..5)
            .prop_map(|v| v.into_iter().fold(0, |a, b| a | b)),
    ]
}

/// An int: small values, the extremes, anything.
fn int() -> impl Strategy<Value = i32> {
    prop_oneof![-2i32..20, Just(i32::MIN), Just(i32::MAX), any::<i32>()]
}

/// A 64-bit value: small, near the top, anything.
fn wide() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..8, (0u64..8).prop_map(|v| u64::MAX - v), any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            prot(),
            mmap_flags(),
            proptest::option::of((fd(), any::<u64>())),
            any::<bool>()
        )
            .prop_map(|(addr, len, prot, bits, file, anon)| {
                // Any raw bits, named or not; with or without fd= either way (no fd= and no anon is fd -1).
                let mut flags = MapFlags::from_bits_retain(bits);
                if anon {
                    flags |= MapFlags::ANONYMOUS;
                }
                Op::Mmap { addr, len, prot, flags, file }
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(addr, len)| Op::Munmap { addr, len }),
        (any::<u64>(), any::<u64>(), prot()).prop_map(|(addr, len, prot)| Op::Mprotect { addr, len, prot }),
        (any::<u64>(), any::<u64>(), prot(), int()).prop_map(|(addr, len, prot, key)| Op::PkeyMprotect {
            addr,
            len,
            prot,
            key
        }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop_oneof![0u32..8, any::<u32>()],
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(addr, old_len, new_len, f, n)| {
                let flags = MremapFlags::from_bits_retain(f);
                // NEWADDR is required with fixed, optional without.
                let new_addr = if flags.contains(MremapFlags::FIXED) { Some(n.unwrap_or(0)) } else { n };
                Op::Mremap { addr, old_len, new_len, flags, new_addr }
            }),
        (any::<u64>(), any::<u64>(), prop_oneof![0i32..30, 99i32..105, any::<i32>()])
            .prop_map(|(addr, len, a)| Op::Madvise { addr, len, advice: Advice::from_raw(a) }),
        (any::<u64>(), any::<u64>()).prop_map(|(addr, len)| Op::Mlock { addr, len }),
        (any::<u64>(), any::<u64>(), prop_oneof![0u32..4, any::<u32>()])
            .prop_map(|(addr, len, flags)| Op::Mlock2 { addr, len, flags }),
        (any::<u64>(), any::<u64>()).prop_map(|(addr, len)| Op::Munlock { addr, len }),
        prop_oneof![0u32..16, any::<u32>()].prop_map(|flags| Op::Mlockall { flags }),
        Just(Op::Munlockall),
        (any::<u64>(), any::<u64>(), wide()).prop_map(|(addr, len, flags)| Op::Mseal { addr, len, flags }),
        (wide(), prop_oneof![0u64..4, wide()]).prop_map(|(flags, rights)| Op::PkeyAlloc { flags, rights }),
        int().prop_map(|key| Op::PkeyFree { key }),
        (any::<u64>(), any::<u64>(), prop_oneof![0u32..8, any::<u32>()])
            .prop_map(|(addr, len, flags)| Op::Msync { addr, len, flags }),
        (file_name(), wide()).prop_map(|(name, size)| Op::Ftruncate { name, size }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(addr, len, write)| Op::Touch {
            addr,
            len,
            write
        }),
        (any::<u64>(), any::<u64>(), any::<u8>()).prop_map(|(addr, len, byte)| Op::Fill { addr, len, byte }),
        (any::<u64>(), any::<u64>()).prop_map(|(addr, len)| Op::Check { addr, len }),
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

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::Addr),
        (u64::MAX - 5000..=u64::MAX).prop_map(Value::Addr),
        Just(Value::Zero),
        (1u64..).prop_map(Value::Num),
        (1i32..5000).prop_map(|e| Value::Err(Errno::from_raw(e))),
        any::<u64>().prop_map(Value::Fault),
        any::<u64>().prop_map(Value::Hash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn script_print_parse(size in any::<u64>(), ops in proptest::collection::vec(op(), 0..40)) {
        let s = Script::from_ops(std::iter::once(Op::File { name: "f".into(), size }).chain(ops));
        let text = s.to_text();
        let back = Script::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &s);
        prop_assert_eq!(back.to_text(), text);
    }

    #[test]
    fn output_render_parse(vals in proptest::collection::vec((1usize..1000, value()), 0..30)) {
        let mut entries: Vec<Entry> = vals
            .into_iter()
            // A `check` line's `0x` value is a hash: hashes go on check lines, addresses on mmap lines, the
            // other values on either.
            .map(|(line, value)| {
                let op = match value {
                    Value::Hash(_) => "check",
                    Value::Addr(_) => "mmap",
                    _ => ["mmap", "check"][line % 2],
                };
                Entry::Call { line, op: op.into(), value }
            })
            .collect();
        entries.push(Entry::Maps(vec!["200000000000-200000001000 rw-p 00000000 00:00 0 ".into()]));
        let o = Output { entries };
        prop_assert_eq!(Output::parse(&o.render()).unwrap(), o);
    }

    /// Whatever a target returns, the driver's value renders and parses back to itself: raw returns in the
    /// top 4 KiB become errnos on both sides.
    #[test]
    fn driver_values_round_trip(raw in prop_oneof![any::<u64>(), (u64::MAX - 5000..=u64::MAX)]) {
        for v in [Value::from_addr(Ok(raw)), Value::from_num(Ok(raw))] {
            let o = Output { entries: vec![Entry::Call { line: 1, op: "pkey_alloc".into(), value: v }] };
            prop_assert_eq!(Output::parse(&o.render()).unwrap(), o);
            prop_assert!(!matches!(v, Value::Addr(a) | Value::Num(a) if a > u64::MAX - 4095));
        }
    }
}
