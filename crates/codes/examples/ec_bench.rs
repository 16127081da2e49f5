//! The `ecstack bench ec` erasure-code rows without building the whole `ecstack` binary: this example
//! compiles `crates/lab/src/ec_bench.rs` itself (the same code), so kernel work can be measured after a
//! release build of this crate alone (about a minute instead of the whole workspace):
//!
//! ```text
//! cargo run --release -p ecstack-codes --features isal-new --example ec_bench -- \
//!     [ROWS e.g. "10,4,1M;12,4,256K"] [LEVELS e.g. avx512-gfni,avx2-gfni] [SECONDS] [ROUNDS] \
//!     [RATELESS e.g. "1024,64K,20": LT and RaptorQ with K blocks of BLOCK bytes, TRIALS orders]
//! ```
//!
//! The figures of record come from `ecstack bench ec` (docs/benchmarks.md); this is the same
//! measurement with the same output columns.

#[allow(dead_code)]
#[path = "../../lab/src/ec_bench.rs"]
mod ec_bench;

/// The two items `ec_bench.rs` takes from the lab crate.
#[derive(Debug)]
#[allow(dead_code)]
pub enum LabError {
    Config { field: &'static str, msg: String },
    Run(String),
    Code(ecstack_codes::CodeError),
}
impl From<ecstack_codes::CodeError> for LabError {
    fn from(e: ecstack_codes::CodeError) -> Self {
        LabError::Code(e)
    }
}
pub type Result<T> = std::result::Result<T, LabError>;

fn size(s: &str) -> usize {
    let s = s.trim();
    let (n, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1024),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    n.parse::<usize>().expect("size") * mul
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows = args
        .first()
        .map(|s| s.as_str())
        .unwrap_or("10,4,1M;6,2,64K;4,2,4K;12,4,256K")
        .split(';')
        .map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            (
                f[0].trim().parse().unwrap(),
                f[1].trim().parse().unwrap(),
                size(f[2]),
            )
        })
        .collect();
    let levels = ec_bench::bench_levels(args.get(1).map(|s| s.as_str()))?;
    let c = ec_bench::EcBenchConfig {
        rows,
        kind: ecstack_codes::CodeKind::RsCauchy,
        levels,
        time: args.get(2).map(|s| s.parse().unwrap()).unwrap_or(0.2),
        rounds: args.get(3).map(|s| s.parse().unwrap()).unwrap_or(3),
        clock: ec_bench::BenchClock::Cpu,
        skew_bytes: 0,
        rateless: args.get(4).map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            ec_bench::RatelessConfig {
                k: f[0].trim().parse().unwrap(),
                block: size(f[1]),
                trials: f.get(2).map(|t| t.trim().parse().unwrap()).unwrap_or(20),
            }
        }),
    };
    println!("peer: {:?}", ec_bench::peer_name()?);
    ec_bench::run(&c, &mut |r| {
        println!(
            "({},{},{}) {:<11} {:<10} ours {:6.1} isal {:6.1} ratio {:.2}",
            r.k,
            r.m,
            r.chunk,
            r.simd,
            r.op,
            r.ours_gbps,
            r.isal_gbps.unwrap_or(0.0),
            r.ratio.unwrap_or(0.0)
        );
    })
    .map(|report| {
        for r in report.rateless {
            println!(
                "{} k={} block={} encode {:6.2} GB/s decode {:6.2} GB/s",
                r.code, r.k, r.block, r.encode_gbps, r.decode_gbps
            );
        }
    })?;
    Ok(())
}
