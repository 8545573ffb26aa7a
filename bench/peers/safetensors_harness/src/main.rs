//! Drives HF safetensors the way a Rust user loads a checkpoint into owned host memory.
//!
//!   safetensors_harness DIR [fresh|refit] [THREADS] [ROUNDS]
//!
//! Untimed: every shard mmap'd and `SafeTensors::deserialize`d (header parse and validation).
//! Timed, per round, on THREADS threads claiming tensors in file order: fresh: every tensor's
//! `data().to_vec()` into a new Vec (fresh pages); refit: `copy_from_slice` into Vecs allocated
//! and touched beforehand, untimed. Afterwards every byte is checked against a pread of the shard.
//! Prints one JSON line: {"peer","mode","threads","bytes","seconds" (best round),"runs",
//! "anon_huge_bytes" (THP-backed anonymous memory with the last round's tensors landed),
//! "malloc_thp" (whether glibc.malloc.hugetlb=1 took effect, see malloc_thp())}.
//! Huge pages come from the caller: GLIBC_TUNABLES=glibc.malloc.hugetlb=1.
use memmap2::Mmap;
use safetensors::SafeTensors;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::Instant;

struct Tensor<'a> {
    shard: usize,
    offset: u64, // in the shard file
    data: &'a [u8],
}

/// Runs `work` on `threads` threads, each claiming the next item of `items` until none is left.
fn parallel<I: Iterator + Send, F: Fn(I::Item) + Sync>(threads: usize, items: I, work: F) {
    let items = Mutex::new(items);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = items.lock().unwrap().next();
                match next {
                    Some(item) => work(item),
                    None => break,
                }
            });
        }
    });
}

/// Bytes of this process's anonymous memory on transparent huge pages (smaps_rollup).
fn anon_huge_bytes() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let line = rollup.lines().find(|l| l.starts_with("AnonHugePages:"));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).unwrap_or(0) << 10
}

/// Whether glibc.malloc.hugetlb=1 took effect: glibc then advises its heap MADV_HUGEPAGE ("hg").
/// Debian 12's glibc 2.36 compares the THP mode it reads from sysfs without NUL-terminating it,
/// so the tunable works in some processes only; the caller reruns those where it did not.
fn malloc_thp() -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut heap = false;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if heap {
                return flags.split_whitespace().any(|f| f == "hg");
            }
        } else if line.split_whitespace().next().map_or(false, |r| r.contains('-') && r.chars().all(|c| c == '-' || c.is_ascii_hexdigit())) {
            heap = line.ends_with("[heap]"); // a mapping's first line
        }
    }
    false
}

fn verify(files: &[File], tensors: &[Tensor], landed: &[Vec<u8>]) {
    let mut tmp = Vec::new();
    for (t, got) in tensors.iter().zip(landed) {
        tmp.resize(t.data.len(), 0);
        files[t.shard].read_exact_at(&mut tmp, t.offset).expect("pread");
        assert!(tmp == *got, "landed bytes differ from pread at offset {} of shard {}", t.offset, t.shard);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: safetensors_harness DIR [fresh|refit] [THREADS] [ROUNDS]");
        std::process::exit(2);
    }
    let mode = args.get(2).map_or("fresh", |s| s.as_str());
    let threads: usize = args.get(3).map_or(1, |s| s.parse().expect("THREADS"));
    let rounds: usize = args.get(4).map_or(1, |s| s.parse().expect("ROUNDS"));
    assert!((mode == "fresh" || mode == "refit") && threads >= 1 && rounds >= 1, "bad mode, threads or rounds");

    let mut paths: Vec<_> = std::fs::read_dir(&args[1])
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().map_or(false, |x| x == "safetensors"))
        .collect();
    paths.sort();
    let files: Vec<File> = paths.iter().map(|p| File::open(p).expect("open")).collect();
    let maps: Vec<Mmap> = files.iter().map(|f| unsafe { Mmap::map(f) }.expect("mmap")).collect();
    let mut tensors = Vec::new();
    for (shard, map) in maps.iter().enumerate() {
        for (_, view) in SafeTensors::deserialize(map).expect("deserialize").tensors() {
            let data = view.data();
            let offset = (data.as_ptr() as usize - map.as_ptr() as usize) as u64;
            tensors.push(Tensor { shard, offset, data });
        }
    }
    tensors.sort_by_key(|t| (t.shard, t.offset));
    let bytes: usize = tensors.iter().map(|t| t.data.len()).sum();

    let mut runs = Vec::new();
    let mut huge = 0;
    for _ in 0..rounds {
        let landed: Vec<Vec<u8>> = if mode == "fresh" {
            let out: Vec<Mutex<Vec<u8>>> = tensors.iter().map(|_| Mutex::new(Vec::new())).collect();
            let t0 = Instant::now();
            parallel(threads, tensors.iter().zip(&out), |(t, o)| *o.lock().unwrap() = t.data.to_vec());
            runs.push(t0.elapsed().as_secs_f64());
            out.into_iter().map(|m| m.into_inner().unwrap()).collect()
        } else {
            // vec![1; n], not vec![0; n]: calloc would leave a fresh mapping untouched.
            let mut dests: Vec<Vec<u8>> = tensors.iter().map(|t| vec![1u8; t.data.len()]).collect();
            let t0 = Instant::now();
            parallel(threads, tensors.iter().zip(dests.iter_mut()), |(t, d)| d.copy_from_slice(t.data));
            runs.push(t0.elapsed().as_secs_f64());
            dests
        };
        huge = anon_huge_bytes();
        verify(&files, &tensors, &landed);
    }
    let best = runs.iter().cloned().fold(f64::INFINITY, f64::min);
    let runs_json: Vec<String> = runs.iter().map(|r| format!("{r:.6}")).collect();
    println!(
        "{{\"peer\": \"safetensors\", \"mode\": \"{mode}\", \"threads\": {threads}, \"bytes\": {bytes}, \
         \"seconds\": {best:.6}, \"runs\": [{}], \"anon_huge_bytes\": {huge}, \"malloc_thp\": {}}}",
        runs_json.join(", "),
        malloc_thp()
    );
}
