//! The PROCMAP_QUERY target: arbitrary argument structs against the model in `vmspace_proc::query`.
//!
//! An input is the caller's `struct procmap_query` (built field by field so that most inputs reach the
//! lookup, with raw values for every field among the choices), the bytes past the 104 the kernel knows, and
//! a list of VMAs. [`check`] computes the answer twice: with the model ([`QueryRequest::validate`],
//! [`QueryRequest::find`] over what the kernel reads ([`QueryRequest::as_read`]), [`QueryAnswer::name_size`])
//! and with an oracle written here from the steps of `fs/proc/task_mmu.c: do_procmap_query` over the raw
//! bytes of the caller's struct (`copy_struct_from_user` reading `size` bytes, the flag and buffer checks,
//! `query_matching_vma`'s loop, the name buffer capped at `PATH_MAX`). The two must agree (errno, VMA and
//! returned name size) and neither may panic. Not modelled: `EFAULT` (user memory is always readable here),
//! `ESRCH`/`EINTR` (the mm is alive, nothing interrupts) and build IDs (the model files have none, so
//! `build_id_size` comes back 0, which is no error).

use arbitrary::{Arbitrary, Unstructured};
use vmspace_proc::query::{
    PROCMAP_QUERY_ALL_FLAGS, PROCMAP_QUERY_COVERING_OR_NEXT_VMA, PROCMAP_QUERY_FILE_BACKED_VMA,
    PROCMAP_QUERY_SIZE, PROCMAP_QUERY_VMA_EXECUTABLE, PROCMAP_QUERY_VMA_READABLE, PROCMAP_QUERY_VMA_SHARED,
    PROCMAP_QUERY_VMA_WRITABLE, errno,
};
use vmspace_proc::{QueryAnswer, QueryRequest};

const PAGE: u64 = 4096;

/// `size`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Size {
    /// The current struct.
    Current,
    /// `n % 160` bytes: older, cut-through and newer struct sizes.
    Small(u8),
    /// Any value.
    Raw(u64),
}

/// A 64-bit input field.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Word {
    /// Zero.
    Zero,
    /// A small value.
    Small(u8),
    /// Any value.
    Raw(u64),
}

impl Word {
    fn value(self) -> u64 {
        match self {
            Word::Zero => 0,
            Word::Small(v) => u64::from(v),
            Word::Raw(v) => v,
        }
    }
}

/// `query_addr`, relative to the VMAs or raw.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum QAddr {
    /// Near the start of VMA `i` (modulo their number), moved by a signed page count and a byte offset.
    Near(u8, i8, u16),
    /// Any value.
    Raw(u64),
}

/// One VMA: the gap before it and its length in pages, `PROCMAP_QUERY_VMA_*` permission bits, whether it is
/// file-backed, and the length of its name if it has one.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct VmaDesc {
    /// Pages between the previous VMA (or the base) and this one.
    pub gap: u8,
    /// Pages, `1 + n % 8`.
    pub pages: u8,
    /// Permission bits (low four).
    pub perms: u8,
    /// File-backed.
    pub file: bool,
    /// Name length, `n % 4200` (0 = no name).
    pub name_len: u16,
}

/// A whole input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    /// `size`.
    pub size: Size,
    /// `query_flags`: known bits only, or a raw word.
    pub flags: Result<u8, u64>,
    /// `query_addr`.
    pub addr: QAddr,
    /// `vma_name_size`.
    pub vma_name_size: u32,
    /// `vma_name_addr`.
    pub vma_name_addr: Word,
    /// `build_id_size`.
    pub build_id_size: u32,
    /// `build_id_addr`.
    pub build_id_addr: Word,
    /// Bytes past the 104 known ones (zero-extended to `size`).
    pub tail: Vec<u8>,
    /// First page of the VMAs.
    pub base: u32,
    /// The VMAs.
    pub vmas: Vec<VmaDesc>,
}

/// A VMA as both sides see it.
#[derive(Debug, Clone)]
pub struct Vma {
    start: u64,
    end: u64,
    perms: u64,
    file: bool,
    name: Option<String>,
}

fn vmas(input: &Input) -> Vec<Vma> {
    let mut at = u64::from(input.base) * PAGE;
    let mut out = Vec::new();
    for d in input.vmas.iter().take(32) {
        let start = at + u64::from(d.gap) * PAGE;
        let end = start + (1 + u64::from(d.pages % 8)) * PAGE;
        let n = usize::from(d.name_len % 4200);
        let name = (n > 0).then(|| if d.file { format!("/{}", "f".repeat(n - 1)) } else { "x".repeat(n) });
        out.push(Vma { start, end, perms: u64::from(d.perms & 0xf), file: d.file, name });
        at = end;
    }
    out
}

/// The caller's request, field by field.
fn request(input: &Input, vmas: &[Vma]) -> QueryRequest {
    let size = match input.size {
        Size::Current => PROCMAP_QUERY_SIZE as u64,
        Size::Small(n) => u64::from(n % 160),
        Size::Raw(v) => v,
    };
    let flags = match input.flags {
        Ok(b) => u64::from(b) & PROCMAP_QUERY_ALL_FLAGS,
        Err(w) => w,
    };
    let addr = match input.addr {
        QAddr::Raw(v) => v,
        QAddr::Near(i, d, o) => {
            let base = if vmas.is_empty() { 0 } else { vmas[usize::from(i) % vmas.len()].start };
            base.wrapping_add_signed(i64::from(d) * PAGE as i64).wrapping_add(u64::from(o % 4096))
        }
    };
    let tail_len = usize::try_from(size).unwrap_or(usize::MAX).min(4096).saturating_sub(PROCMAP_QUERY_SIZE);
    QueryRequest {
        size,
        flags,
        addr,
        vma_name_size: input.vma_name_size,
        vma_name_addr: input.vma_name_addr.value(),
        build_id_size: input.build_id_size,
        build_id_addr: input.build_id_addr.value(),
        nonzero_tail: input.tail.iter().take(tail_len).any(|&b| b != 0),
    }
}

/// What a successful query returns that both sides compute: the VMA's index and `vma_name_size`.
pub type Answer = Result<(usize, u32), i32>;

/// The model's answer.
pub fn model(q: &QueryRequest, vmas: &[Vma]) -> Answer {
    q.validate()?;
    let k = q.as_read();
    let i = k.find(vmas.iter().map(|v| (v.start, v.end, v.perms, v.file)))?;
    let name = if k.vma_name_size != 0 { vmas[i].name.clone() } else { None };
    let answer = QueryAnswer { vma_start: vmas[i].start, vma_end: vmas[i].end, name, ..Default::default() };
    let name_size = if k.vma_name_size != 0 { answer.name_size(k.vma_name_size)? } else { 0 };
    Ok((i, name_size))
}

/// The caller's struct as bytes: `size` of them (at most a page), the 104 known ones then the tail.
fn user_bytes(q: &QueryRequest, tail: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; PROCMAP_QUERY_SIZE];
    b[0..8].copy_from_slice(&q.size.to_le_bytes());
    b[8..16].copy_from_slice(&q.flags.to_le_bytes());
    b[16..24].copy_from_slice(&q.addr.to_le_bytes());
    b[80..84].copy_from_slice(&q.vma_name_size.to_le_bytes());
    b[84..88].copy_from_slice(&q.build_id_size.to_le_bytes());
    b[88..96].copy_from_slice(&q.vma_name_addr.to_le_bytes());
    b[96..104].copy_from_slice(&q.build_id_addr.to_le_bytes());
    let n = usize::try_from(q.size).unwrap_or(usize::MAX).min(4096);
    if n > PROCMAP_QUERY_SIZE {
        b.extend(tail.iter().copied().chain(std::iter::repeat(0)).take(n - PROCMAP_QUERY_SIZE));
    }
    b
}

/// The oracle: `do_procmap_query`'s steps over the caller's bytes.
pub fn oracle(user: &[u8], vmas: &[Vma]) -> Answer {
    let rd =
        |b: &[u8], o: usize, n: usize| b[o..o + n].iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x));
    let usize_ = rd(user, 0, 8);
    if usize_ > PAGE {
        return Err(errno::E2BIG);
    }
    if usize_ < 24 {
        return Err(errno::EINVAL);
    }
    // copy_struct_from_user(&karg, sizeof(karg), uarg, usize).
    let usize_ = usize_ as usize;
    if usize_ > PROCMAP_QUERY_SIZE && user[PROCMAP_QUERY_SIZE..usize_].iter().any(|&b| b != 0) {
        return Err(errno::E2BIG);
    }
    let mut karg = [0u8; PROCMAP_QUERY_SIZE];
    let n = usize_.min(PROCMAP_QUERY_SIZE);
    karg[..n].copy_from_slice(&user[..n]);
    let flags = rd(&karg, 8, 8);
    let mut addr = rd(&karg, 16, 8);
    let name_size = rd(&karg, 80, 4);
    let build_id_size = rd(&karg, 84, 4);
    let name_addr = rd(&karg, 88, 8);
    let build_id_addr = rd(&karg, 96, 8);
    if flags & !0x3f != 0 {
        return Err(errno::EINVAL);
    }
    if (name_size != 0) != (name_addr != 0) || (build_id_size != 0) != (build_id_addr != 0) {
        return Err(errno::EINVAL);
    }
    // query_matching_vma.
    let i = loop {
        let Some(i) = vmas.iter().position(|v| v.end > addr) else { return Err(errno::ENOENT) };
        let v = &vmas[i];
        let skip = (flags & PROCMAP_QUERY_FILE_BACKED_VMA != 0 && !v.file)
            || (flags & PROCMAP_QUERY_VMA_READABLE != 0 && v.perms & PROCMAP_QUERY_VMA_READABLE == 0)
            || (flags & PROCMAP_QUERY_VMA_WRITABLE != 0 && v.perms & PROCMAP_QUERY_VMA_WRITABLE == 0)
            || (flags & PROCMAP_QUERY_VMA_EXECUTABLE != 0 && v.perms & PROCMAP_QUERY_VMA_EXECUTABLE == 0)
            || (flags & PROCMAP_QUERY_VMA_SHARED != 0 && v.perms & PROCMAP_QUERY_VMA_SHARED == 0);
        if !skip && (flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0 || v.start <= addr) {
            break i;
        }
        addr = v.end;
        if flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA == 0 {
            return Err(errno::ENOENT);
        }
    };
    // Build ID: the model files have none; build_id_size comes back 0 without an error.
    let mut out_name_size = 0;
    if name_size != 0 {
        let buf = name_size.min(4096);
        if let Some(name) = &vmas[i].name {
            let need = name.len() as u64 + 1;
            if need > buf {
                return Err(errno::ENAMETOOLONG);
            }
            out_name_size = need as u32;
        }
    }
    Ok((i, out_name_size))
}

/// Checks one input; panics (the fuzzer's crash) when the model and the oracle disagree.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let _ = check_input(&input);
}

/// The check on a decoded input; returns the agreed answer.
pub fn check_input(input: &Input) -> Answer {
    let vmas = vmas(input);
    let q = request(input, &vmas);
    let m = model(&q, &vmas);
    let o = oracle(&user_bytes(&q, &input.tail), &vmas);
    assert_eq!(m, o, "model and kernel rules disagree on {q:?} over {vmas:?}");
    m
}
