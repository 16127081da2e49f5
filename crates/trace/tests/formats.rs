//! Hand-built small traces in every accepted format, with statistics computed by hand.

use ecstack_trace::analyze::{analyze_files, AnalyzeOptions, GroupBy};
use ecstack_trace::parse::{read_all, BlkAction, Format, ParseOptions, TraceReader};
use ecstack_trace::{Op, TraceError};
use std::io::Write;
use std::path::{Path, PathBuf};

fn write_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn analyze(p: &Path, opts: ParseOptions) -> ecstack_trace::Report {
    analyze_files(&[p], &opts, AnalyzeOptions::default(), |_| {}).unwrap()
}

const FT: u64 = 128_166_372_000_000_000; // a Windows FILETIME in Feb 2007

/// MSR: one volume, 4 KiB blocks.
///   W [0,8K)        first write, blocks 0,1
///   W [4K,8K)       update (block 1), jump |4K-8K| < 64K -> sequential
///   R [1M,1M+4K)    read block 256
///   W [1M,1M+16K)   update (block 256 read before), blocks 256..259; jump |1M - 8K| -> random
///   W [10M, 10M+600K) first write, 150 blocks; random
///   W [0, 2K)       update of block 0, 2 KiB (<4K class); random (|0 - (10M+600K)|)
fn msr_body() -> String {
    let l =
        |dt: u64, ty: &str, off: u64, len: u64| format!("{},usr,0,{ty},{off},{len},100\n", FT + dt);
    [
        l(0, "Write", 0, 8192),
        l(10, "Write", 4096, 4096),
        l(20, "Read", 1 << 20, 4096),
        l(30, "Write", 1 << 20, 16384),
        l(40, "Write", 10 << 20, 600 << 10),
        l(50, "Write", 0, 2048),
    ]
    .concat()
}

#[test]
fn msr_hand_computed() {
    let d = tempfile::tempdir().unwrap();
    let p = write_file(d.path(), "usr_0.csv", &msr_body());
    let rep = analyze(&p, ParseOptions::default());
    assert_eq!(rep.volumes.len(), 1);
    let v = &rep.volumes[0];
    assert_eq!(v.volume, "usr_0");
    assert_eq!(v.writes, 5);
    assert_eq!(v.reads, 1);
    // WSS: blocks 0,1 + 256..259 + 150 blocks = 156 blocks
    assert_eq!(v.wss_bytes, 156 * 4096);
    assert_eq!(v.write_wss_bytes, 156 * 4096);
    // updated blocks: 1 (2nd write), 256 (4th write, read before), 0 (last write)
    assert_eq!(v.updated_wss_bytes, 3 * 4096);
    assert!((v.updated_wss_pct - 100.0 * 3.0 / 156.0).abs() < 1e-9);
    // update writes: #2, #4, #6
    assert_eq!(v.update_writes, 3);
    assert!((v.update_writes_pct - 60.0).abs() < 1e-9);
    assert!((v.avg_update_size - (4096.0 + 16384.0 + 2048.0) / 3.0).abs() < 1e-9);
    // classes: 2048 -> <4K, 4096 -> 4-16K, 16384 -> 16-64K
    assert_eq!(v.update_size_hist, [1, 1, 1, 0, 0]);
    // random: #3 (W at 1M), #4 (10M), #5 (0) ; #1 has no predecessor, #2 is sequential
    assert_eq!(v.random_writes, 3);
    assert!((v.random_write_pct - 60.0).abs() < 1e-9);
    assert!((v.read_pct - 100.0 / 6.0).abs() < 1e-9);
    assert_eq!(v.duration_s, 50e-7);
    assert!(v.files_accessed.is_none());
    // reuse: block accesses: block0: 2 (W,W), block1: 2, block256: 2 (R,W), others 1.
    // total accesses = 2+2+2 + 3 (257..259) + 150 = 159; top 3 blocks hold 6/159
    let cdf = &v.reuse_cdf;
    assert_eq!(cdf.len(), 101);
    assert!((cdf[100][1] - 1.0).abs() < 1e-9);
    assert!(cdf[1][1] > 0.0);
}

#[test]
fn msr_gzip_and_zstd_are_detected_by_magic() {
    let d = tempfile::tempdir().unwrap();
    let body = msr_body();
    let gz = d.path().join("t.anything");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    e.write_all(body.as_bytes()).unwrap();
    e.finish().unwrap();
    let zs = d.path().join("t2.csv");
    std::fs::write(&zs, zstd::encode_all(body.as_bytes(), 3).unwrap()).unwrap();
    let plain = write_file(d.path(), "t.csv", &body);
    let (a, _, _) = read_all(&[&plain], &ParseOptions::default()).unwrap();
    let (b, _, _) = read_all(&[&gz], &ParseOptions::default()).unwrap();
    let (c, _, _) = read_all(&[&zs], &ParseOptions::default()).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a, b);
    assert_eq!(a, c);
}

#[test]
fn msr_malformed_line_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let mut body = msr_body();
    body.push_str(&format!("{},usr,0,Write,12x4,4096,1\n", FT + 60));
    body.push_str(&format!("{},usr,0,Write,0,4096,1\n", FT + 70));
    let p = write_file(d.path(), "bad.csv", &body);
    let err = analyze_files(
        &[&p],
        &ParseOptions::default(),
        AnalyzeOptions::default(),
        |_| {},
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TraceError::Parse { line: 7, .. }), "{msg}");
    assert!(msg.contains("bad.csv:7:"), "{msg}");
    assert!(msg.contains("offset"), "{msg}");
    // --skip-bad continues and counts
    let opts = ParseOptions {
        skip_bad: true,
        ..Default::default()
    };
    let rep = analyze(&p, opts.clone());
    assert_eq!(rep.skipped, 1);
    assert_eq!(rep.volumes[0].writes, 6);
    let mut r = TraceReader::open(&p, opts).unwrap();
    while r.next_record().unwrap().is_some() {}
    assert!(r.first_skipped().unwrap().contains("bad.csv:7:"));
}

#[test]
fn msr_bad_type_and_short_line() {
    let d = tempfile::tempdir().unwrap();
    let p = write_file(
        d.path(),
        "t.csv",
        &format!("{FT},h,0,Write,0,4096,1\n{FT},h,0,Erase,0,4096,1\n"),
    );
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.csv:2:") && e.contains("Erase"), "{e}");
    let p = write_file(
        d.path(),
        "u.csv",
        &format!("{FT},h,0,Write,0,4096,1\n{FT},h,0\n"),
    );
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("u.csv:2:") && e.contains("fields"), "{e}");
}

/// SPC (Financial1 style): ASU, LBA (512 B sectors), size, opcode, seconds.
#[test]
fn spc_hand_computed() {
    let d = tempfile::tempdir().unwrap();
    let body = "0,0,8192,w,0.000000\n\
                0,8,4096,W,0.001000\n\
                1,100,4096,r,0.002000\n\
                0,1000,512,w,0.003500\n\
                1,100,4096,w,0.004\n";
    let p = write_file(d.path(), "Financial1.spc", body);
    let (recs, vols, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(recs.len(), 5);
    assert_eq!(recs[1].offset, 4096);
    assert_eq!(recs[3].time_ns, 3_500_000);
    assert_eq!(vols.name(recs[2].volume), "asu1");
    let rep = analyze(&p, ParseOptions::default());
    let a0 = rep.volume("asu0").unwrap();
    // asu0: W[0,8K) W[4K,8K) (update, seq), W[512000, +512) (first, random)
    assert_eq!(a0.writes, 3);
    assert_eq!(a0.update_writes, 1);
    assert_eq!(a0.random_writes, 1);
    assert_eq!(a0.wss_bytes, 3 * 4096);
    assert_eq!(a0.updated_wss_bytes, 4096);
    let a1 = rep.volume("asu1").unwrap();
    // asu1: R block at 51200 (block 12), then W same -> update of read data
    assert_eq!(a1.reads, 1);
    assert_eq!(a1.writes, 1);
    assert_eq!(a1.update_writes, 1);
    assert_eq!(a1.wss_bytes, 4096 * 2); // 51200..55296 spans blocks 12 and 13
    assert!((a1.updated_wss_pct - 100.0).abs() < 1e-9);
    // malformed opcode
    let p = write_file(d.path(), "bad.spc", "0,0,8192,w,0.0\n0,0,8192,x,0.1\n");
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.spc:2:") && e.contains("opcode"), "{e}");
}

/// Harvard nfsdump: calls carry fh / off / count in hex; replies and other ops are ignored.
#[test]
fn nfs_hand_computed() {
    let d = tempfile::tempdir().unwrap();
    let fa = "3d0b2c00b8d0ee2ba200000000000000";
    let fb = "3d0b2c00b8d0ee2ba200000000000001";
    let fc = "3d0b2c00b8d0ee2ba200000000000002";
    let body = format!(
        "1043818003.264534 30.0801 31.03ea U C3 5c5e0f0 7 write fh {fa} off 0 count 2000 stable 2 con = 130 len = 8300\n\
         1043818003.265043 31.03ea 30.0801 U R3 5c5e0f0 7 write OK ftype 1 mode 1a4 count 2000 status=0 pl = 8292 con = 130 len = 8328\n\
         1043818003.300000 30.0801 31.03ea U C3 5c5e0f1 1 getattr fh {fa} con = 130 len = 100\n\
         1043818003.400000 30.0801 31.03ea U C3 5c5e0f2 7 write fh {fa} off 1000 count 1000 stable 2\n\
         1043818003.500000 30.0801 31.03ea U C3 5c5e0f3 6 read fh {fb} off 0 count 2000\n\
         1043818003.600000 30.0801 31.03ea U C3 5c5e0f4 7 write fh {fc} off 20000 count 1000 stable 2\n\
         1043818003.700000 30.0801 31.03ea U C3 5c5e0f5 7 write fh {fb} off 0 count 800 stable 2\n"
    );
    let p = write_file(d.path(), "deas03.txt", &body);
    let (recs, vols, files) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(recs.len(), 5);
    assert_eq!(vols.name(recs[0].volume), "31");
    assert_eq!(recs[0].len, 0x2000);
    assert_eq!(recs[1].offset, 0x1000);
    assert_eq!(recs[1].file, recs[0].file);
    assert_eq!(files.len(), 3);
    assert_eq!(recs[3].time_ns, 1_043_818_003_600_000_000);
    let rep = analyze(&p, ParseOptions::default());
    let v = &rep.volumes[0];
    // writes: A[0,8K) first; A[4K,8K) update; C[128K,+4K) first; B[0,2K) update (B read before)
    assert_eq!(v.writes, 4);
    assert_eq!(v.update_writes, 2);
    assert_eq!(v.files_accessed, Some(3));
    assert_eq!(v.files_updated, Some(2));
    assert!((v.updated_files_pct.unwrap() - 200.0 / 3.0).abs() < 1e-9);
    // WSS: A 2 blocks, B 2 blocks, C 1 block
    assert_eq!(v.wss_bytes, 5 * 4096);
    assert_eq!(v.updated_wss_bytes, 2 * 4096);
    // random: #2 same file, 4K start vs 8K end -> seq; #3 other file -> random; #4 other file
    assert_eq!(v.random_writes, 2);
    assert!((v.avg_update_size - (4096.0 + 2048.0) / 2.0).abs() < 1e-9);
    let p = write_file(
        d.path(),
        "bad.txt",
        &format!(
            "1043818003.264534 30.0801 31.03ea U C3 5c5e0f0 7 write fh {fa} off zz count 2000\n"
        ),
    );
    let e = read_all(
        &[&p],
        &ParseOptions {
            format: Some(Format::Nfs),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bad.txt:1:") && e.contains("hex offset"), "{e}");
}

const BLK: &str = "  8,0    3        1     0.000000000   697  Q  WS 2048 + 16 [kjournald]
  8,0    3        2     0.000001000   697  G  WS 2048 + 16 [kjournald]
  8,0    3        3     0.000002000   697  D  WS 2048 + 16 [kjournald]
  8,0    3        4     0.000100000   697  C  WS 2048 + 16 [0]
  8,0    1        5     0.001000000   700  Q   R 2056 + 8 [cat]
  8,0    1        6     0.002000000   700  Q  WS 2056 + 8 [kjournald]
  8,0    1        7     0.003000000   700  Q  FWS 0 + 0 [kjournald]
  8,16   0        1     0.004000000   700  Q   W 4096 + 8 [dd]
  8,0    0        8     0.005000000   700  Q   D 8192 + 2048 [fstrim]
CPU0 (8,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           2,       12KiB
Total (8,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           2,       12KiB
";

#[test]
fn blkparse_hand_computed() {
    let d = tempfile::tempdir().unwrap();
    let p = write_file(d.path(), "trace.txt", BLK);
    let (recs, vols, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(recs.len(), 5, "{recs:?}");
    assert_eq!(recs[0].offset, 2048 * 512);
    assert_eq!(recs[0].len, 16 * 512);
    assert_eq!(recs[1].op, Op::Read);
    assert_eq!(recs[4].op, Op::Discard);
    assert_eq!(vols.name(recs[3].volume), "8,16");
    let rep = analyze(&p, ParseOptions::default());
    let v = rep.volume("8,0").unwrap();
    // W [1M, 1M+8K) blocks 256,257; R [1M+4K, +4K) block 257; W block 257 -> update
    assert_eq!(v.writes, 2);
    assert_eq!(v.reads, 1);
    assert_eq!(v.discards, 1);
    assert_eq!(v.update_writes, 1);
    assert_eq!(v.wss_bytes, 2 * 4096);
    assert_eq!(v.updated_wss_bytes, 4096);
    // with D (issue) events only one write, no reads
    let (recs, _, _) = read_all(
        &[&p],
        &ParseOptions {
            blk_action: BlkAction::Issue,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(recs.len(), 1);
    // a garbage line before the summary is an error
    let p = write_file(
        d.path(),
        "bad.txt",
        &BLK.replacen("  8,0    1        6", "  garbage", 1),
    );
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.txt:6:"), "{e}");
}

#[test]
fn fio_v2_and_v3() {
    let d = tempfile::tempdir().unwrap();
    let v2 = "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb write 0 4096\n/dev/sdb wait 1500 0\n/dev/sdb write 4096 4096\n/dev/sdb read 0 8192\n/dev/sdb sync 0 0\n/dev/sdb trim 65536 4096\n/dev/sdb close\n";
    let p = write_file(d.path(), "a.log", v2);
    let (recs, vols, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(recs.len(), 4);
    assert_eq!(vols.name(0), "/dev/sdb");
    assert_eq!(recs[1].time_ns, 1_500_000);
    assert_eq!(recs[3].op, Op::Discard);
    let rep = analyze(&p, ParseOptions::default());
    let v = &rep.volumes[0];
    assert_eq!(
        (v.writes, v.reads, v.update_writes, v.random_writes),
        (2, 1, 0, 0)
    );
    let v3 = "fio version 3 iolog\n0 /dev/sdb add\n0 /dev/sdb open\n100 /dev/sdb write 0 4096\n250 /dev/sdb write 0 4096\n300 /dev/sdb write 1048576 4096\n400 /dev/sdb close\n";
    let p = write_file(d.path(), "b.log", v3);
    let (recs, _, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(
        recs.iter().map(|r| r.time_ns).collect::<Vec<_>>(),
        [100_000, 250_000, 300_000]
    );
    let rep = analyze(&p, ParseOptions::default());
    let v = &rep.volumes[0];
    assert_eq!((v.writes, v.update_writes, v.random_writes), (3, 1, 1));
    assert!((v.updated_wss_pct - 50.0).abs() < 1e-9);
    let p = write_file(
        d.path(),
        "c.log",
        "fio version 3 iolog\n0 /dev/sdb add\n10 /dev/sdb wait 100 0\n",
    );
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("c.log:3:") && e.contains("wait"), "{e}");
    let p = write_file(d.path(), "d.log", "fio version 2 iolog\n/dev/sdb write 0\n");
    let e = read_all(&[&p], &ParseOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("d.log:2:"), "{e}");
}

#[test]
fn unknown_format_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let p = write_file(d.path(), "x.txt", "hello world\n");
    let e = TraceReader::open(&p, ParseOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::UnknownFormat { .. }), "{e}");
}

#[test]
fn group_all_keeps_volumes_apart() {
    let d = tempfile::tempdir().unwrap();
    let body = format!("{FT},a,0,Write,0,4096,1\n{FT},b,0,Write,0,4096,1\n");
    let p = write_file(d.path(), "t.csv", &body);
    let rep = analyze_files(
        &[&p],
        &ParseOptions::default(),
        AnalyzeOptions {
            group_by: GroupBy::All,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(rep.volumes.len(), 1);
    assert_eq!(rep.volumes[0].wss_bytes, 8192);
    assert_eq!(rep.volumes[0].update_writes, 0);
}

#[test]
fn writers_round_trip_through_parsers() {
    use ecstack_trace::write::{write_records, OutFormat};
    let t = ecstack_trace::synthesize_preset("eplog-mds", 0.002, 3).unwrap();
    let d = tempfile::tempdir().unwrap();
    for (f, name) in [
        (OutFormat::Msr, "x.csv"),
        (OutFormat::Spc, "x.spc"),
        (OutFormat::Fio2, "x2.log"),
        (OutFormat::Fio3, "x3.log"),
        (OutFormat::Blkparse, "x.blk"),
    ] {
        let p = d.path().join(name);
        write_records(
            std::fs::File::create(&p).unwrap(),
            f,
            &t.records,
            &t.volumes,
        )
        .unwrap();
        let (back, _, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
        assert_eq!(back.len(), t.records.len(), "{f:?}");
        for (a, b) in t.records.iter().zip(&back) {
            assert_eq!((a.op, a.offset, a.len), (b.op, b.offset, b.len), "{f:?}");
        }
    }
    // file trace through nfsdump
    let t = ecstack_trace::synthesize_preset("harvard-deas03", 0.0002, 3).unwrap();
    let p = d.path().join("x.nfs");
    write_records(
        std::fs::File::create(&p).unwrap(),
        OutFormat::Nfs,
        &t.records,
        &t.volumes,
    )
    .unwrap();
    let (back, _, _) = read_all(&[&p], &ParseOptions::default()).unwrap();
    assert_eq!(back.len(), t.records.len());
    let rep_a = ecstack_trace::analyze_records(&t.records, &t.volumes, AnalyzeOptions::default());
    let rep_b = analyze(&p, ParseOptions::default());
    assert_eq!(rep_a.volumes[0].wss_bytes, rep_b.volumes[0].wss_bytes);
    assert_eq!(
        rep_a.volumes[0].files_updated,
        rep_b.volumes[0].files_updated
    );
}

#[test]
fn binary_input_is_rejected_without_reading_it_into_memory() {
    let d = tempfile::tempdir().unwrap();
    // 8 MiB without a newline
    let p = d.path().join("blob.bin");
    std::fs::write(&p, vec![0xabu8; 8 << 20]).unwrap();
    let e = TraceReader::open(&p, ParseOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::UnknownFormat { .. }), "{e}");
    let e = read_all(
        &[&p],
        &ParseOptions {
            format: Some(Format::Msr),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("blob.bin:1:") && e.contains("longer than"),
        "{e}"
    );
}
