//! Metered wrapper: exact counts.

use ecstack_device::{BlockDevice, DeviceStats, MemDevice, Metered};

#[test]
fn exact_counts_and_reset() {
    let m = Metered::new(MemDevice::new(1 << 20).unwrap());
    let mut b = vec![0u8; 4096];
    m.write_at(&b, 0).unwrap(); // seq (starts at 0)
    m.write_at(&b, 4096).unwrap(); // seq
    m.write_at(&b, 100_000).unwrap(); // rand
    m.read_at(&mut b, 104_096).unwrap(); // seq (follows the write)
    m.read_at(&mut b[..512], 0).unwrap(); // rand
    m.read_at(&mut b[..512], 512).unwrap(); // seq
    m.flush().unwrap();
    m.discard(8192, 4096).unwrap();
    m.discard(0, 100).unwrap();
    assert!(m.write_at(&b, (1 << 20) - 1).is_err()); // not counted as an op
    let want = DeviceStats {
        read_ops: 3,
        read_bytes: 4096 + 1024,
        write_ops: 3,
        write_bytes: 3 * 4096,
        seq_reads: 2,
        rand_reads: 1,
        seq_writes: 2,
        rand_writes: 1,
        flushes: 1,
        discards: 2,
        discard_bytes: 4196,
        modeled_ns: 0,
        errors: 1,
        model: None,
    };
    assert_eq!(m.snapshot(), want);
    assert_eq!(m.stats(), want);
    assert_eq!(m.errors(), 1);
    m.reset();
    assert_eq!(m.snapshot(), DeviceStats::default());
    m.read_at(&mut b[..512], 1024).unwrap(); // continues from the last request: seq
    assert_eq!(m.snapshot().seq_reads, 1);
    let json = serde_json::to_string(&m.snapshot()).unwrap();
    assert!(json.contains("\"seq_reads\":1"));
}
