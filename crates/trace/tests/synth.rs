//! analyze(synthesize(preset)) reproduces the preset's targets within a few percent, for every
//! preset; and synthesis is deterministic.

use ecstack_trace::analyze::{analyze_records, AnalyzeOptions};
use ecstack_trace::synth::{preset, presets, synthesize, Generator};

const TOL: f64 = 0.03;

fn scale_for(name: &str) -> f64 {
    match name {
        "harvard-deas03" => 0.005,
        "msr-prn1" => 0.05,
        "msr-src22" => 0.1,
        _ => 0.2,
    }
}

#[test]
fn every_preset_round_trips() {
    let mut failures = Vec::new();
    for p in presets() {
        let scale = scale_for(&p.name);
        let t = synthesize(&p.generator, scale, 42).unwrap();
        let rep = analyze_records(
            &t.records,
            &t.volumes,
            AnalyzeOptions {
                reuse_cdf: false,
                ..Default::default()
            },
        );
        assert_eq!(rep.volumes.len(), 1, "{}", p.name);
        for c in p.check(&rep.volumes[0], scale, TOL) {
            eprintln!(
                "{:<16} {:<18} target {:>14.3} measured {:>14.3} err {:>6.3}%",
                p.name,
                c.metric.name(),
                c.target,
                c.measured,
                c.error * 100.0
            );
            if !c.ok {
                failures.push(format!("{} {}: {:?}", p.name, c.metric.name(), c));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn full_scale_eplog_mds_round_trips() {
    let p = preset("eplog-mds").unwrap();
    let t = synthesize(&p.generator, 1.0, 1).unwrap();
    let rep = analyze_records(&t.records, &t.volumes, AnalyzeOptions::default());
    for c in p.check(&rep.volumes[0], 1.0, TOL) {
        assert!(c.ok, "{c:?}");
    }
}

#[test]
fn deterministic_from_seed() {
    let p = preset("msr-hm0").unwrap();
    let a = synthesize(&p.generator, 0.01, 9).unwrap();
    let b = synthesize(&p.generator, 0.01, 9).unwrap();
    let c = synthesize(&p.generator, 0.01, 10).unwrap();
    assert_eq!(a.records, b.records);
    assert_ne!(a.records, c.records);
    assert!(matches!(p.generator, Generator::Targets(_)));
}

#[test]
fn infeasible_targets_are_rejected() {
    let mut p = preset("eplog-fin").unwrap();
    if let Generator::Targets(t) = &mut p.generator {
        t.update_writes_pct = 10.0; // 3.7M first-writes cannot fit in 3.67 GiB
    }
    let e = synthesize(&p.generator, 1.0, 1).err().unwrap().to_string();
    assert!(e.contains("first-writes"), "{e}");
}
