//! The formats against the real kernel: this test process's own `/proc/self/{maps,smaps,smaps_rollup}`,
//! parsed and rendered back, must be byte-identical. Plus a proptest round trip of generated lines.

use proptest::prelude::*;
use vmspace_proc::{
    MapsLine, MapsName, Perms, SmapsRollup, parse_maps, parse_smaps, render_maps, render_smaps,
};

#[test]
fn real_maps_round_trip() {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let lines = parse_maps(&text).unwrap_or_else(|(n, e)| panic!("line {n}: {e}"));
    assert!(lines.len() > 5);
    assert!(lines.iter().any(|l| l.name == Some(MapsName::Stack)));
    assert_eq!(render_maps(&lines), text);
}

#[test]
fn real_smaps_round_trip() {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let recs = parse_smaps(&text).unwrap_or_else(|(n, e)| panic!("line {n}: {e}"));
    assert!(recs.len() > 5);
    assert!(recs.iter().all(|r| r.size_kb * 1024 == r.header.end - r.header.start));
    assert_eq!(render_smaps(&recs), text);
}

#[test]
fn real_smaps_rollup_round_trip() {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    let r = SmapsRollup::parse(&text).unwrap();
    assert!(r.stats.rss > 0 && r.start < r.end);
    assert_eq!(r.render(), text);
}

fn name_strategy() -> impl Strategy<Value = Option<MapsName>> {
    prop_oneof![
        Just(None),
        Just(Some(MapsName::Heap)),
        Just(Some(MapsName::Stack)),
        "[a-zA-Z0-9_ .-]{0,20}".prop_map(|n| Some(MapsName::Anon(n))),
        "[a-z0-9_]{1,12}".prop_map(|n| Some(MapsName::Special(format!("[{n}]")))),
        ("(/[a-zA-Z0-9_. \n-]{1,16}){1,4}", any::<bool>())
            .prop_map(|(path, deleted)| Some(MapsName::Path { path, deleted })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn render_parse_round_trip(
        start in any::<u64>(), end in any::<u64>(), bits in 0u8..16, offset in any::<u64>(),
        dev_major in 0u32..4096, dev_minor in 0u32..(1 << 20), inode in any::<u64>(), name in name_strategy(),
    ) {
        let perms = Perms { read: bits & 1 != 0, write: bits & 2 != 0, exec: bits & 4 != 0, shared: bits & 8 != 0 };
        let line = MapsLine { start, end, perms, offset, dev_major, dev_minor, inode, name };
        let text = line.render();
        let back: MapsLine = text.parse().unwrap();
        prop_assert_eq!(&back, &line);
        prop_assert_eq!(back.render(), text);
    }
}
