//! A heterogeneous testbed (`Testbed::create_shaped`): every OSD's own rate (tbf) and delay (a delay
//! line on its outbound side), the tbfs checked with `tc -s qdisc`, both measured: the round trip to
//! a delayed host by TCP connects, the rates by short TCP transfers. Needs root and iproute2 (a
//! failure under CI=true, a skip notice elsewhere).

use ecstack_lab::codfs_netns::{Shaping, Testbed};

fn tools_or_skip() -> bool {
    use ecstack_testkit::{require, runs_with};
    // SAFETY: geteuid cannot fail.
    let root = unsafe { geteuid() } == 0;
    require("ip", runs_with("ip", "-V"), "iproute2")
        && require("tc", runs_with("tc", "-V"), "iproute2")
        && require("root (the namespaces need it)", root, "sudo")
}

extern "C" {
    fn geteuid() -> u32;
}

#[test]
fn per_osd_rates_and_delays_are_installed_and_measured() {
    if !tools_or_skip() {
        return;
    }
    let fast = Shaping::rate(80.0);
    let far = Shaping {
        rate_mbit: 20.0,
        delay_ms: 30.0,
    };
    let bed = Testbed::create_shaped(&[fast, far], 1, None).unwrap();
    let (o_fast, o_far, client) = (&bed.osds[0], &bed.osds[1], &bed.clients[0]);
    assert_eq!((o_far.rate_mbit, o_far.delay_ms), (Some(20.0), 30.0));

    // What tc installed on each OSD's outbound side: the tbf at the root, at the OSD's rate (the
    // delay is not a qdisc: this kernel has no netem, see codfs_netns).
    for (osd, mbit) in [(o_fast, 80.0), (o_far, 20.0)] {
        let q = Testbed::outbound_qdiscs(osd).unwrap();
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!(
            (&q[0]["kind"], &q[0]["root"]),
            (&"tbf".into(), &true.into()),
            "{q:?}"
        );
        let rate = q[0]["options"]["rate"].as_f64().unwrap();
        assert!(
            (rate - mbit * 1e6 / 8.0).abs() < 1.0,
            "tbf rate {rate} B/s for {mbit} Mbit/s"
        );
    }

    // Round trips: the delay is on the far OSD's outbound side, so every round trip through it gains
    // 30 ms (the delay line's sleep overshoots by well under a millisecond); the fast OSD's stays well under a millisecond or two (veth and bridge). The upper bound
    // leaves 15 ms for a loaded 2-core machine scheduling the threads.
    let rtt_fast = Testbed::tcp_connect_rtt(client, o_fast, 9).unwrap();
    let rtt_far = Testbed::tcp_connect_rtt(client, o_far, 9).unwrap();
    println!(
        "connect RTT: fast OSD {:.2} ms, far OSD {:.2} ms",
        rtt_fast * 1e3,
        rtt_far * 1e3
    );
    assert!(rtt_fast < 0.010, "fast OSD's RTT {rtt_fast} s");
    assert!(
        (0.0295..0.045).contains(&rtt_far),
        "far OSD's RTT {rtt_far} s (30 ms of netem)"
    );

    // Rates, each way, through the tbf: TCP goodput is the rate less TCP/IP and Ethernet framing
    // (about 5% at 1500-byte frames), and the tbf's burst lets a little more through at the start.
    // Tolerance 0.80..1.05 of R/8: enough for a loaded machine, tight enough to tell 20 from 80.
    for (from, to, mbit) in [
        (o_fast, client, 80.0),
        (client, o_fast, 80.0),
        (o_far, client, 20.0),
        (client, o_far, 20.0),
    ] {
        let got = Testbed::tcp_goodput(from, to, 1.5).unwrap();
        let ratio = got / (mbit * 1e6 / 8.0);
        println!(
            "{mbit} Mbit/s link: {:.3} MB/s goodput, {ratio:.3} of the rate",
            got / 1e6
        );
        assert!(
            (0.80..1.05).contains(&ratio),
            "{} -> {}: {:.2} MB/s is {ratio:.2} of {mbit} Mbit/s",
            from.namespace,
            to.namespace,
            got / 1e6
        );
    }
    let names = bed.namespaces();
    drop(bed);
    let left = ecstack_lab::codfs_netns::list_namespaces();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces left: {left:?}"
    );
}

#[test]
fn bad_shaping_is_one_clear_line() {
    // Checked before anything is created (and before the tools: no root needed).
    let e = |s: &[Shaping]| {
        Testbed::create_shaped(s, 1, None)
            .err()
            .unwrap()
            .to_string()
    };
    let one = e(&[Shaping::rate(0.0)]);
    assert!(one.contains("must be a positive number of Mbit/s"), "{one}");
    let nan = e(&[Shaping::rate(10.0), Shaping::rate(f64::NAN)]);
    assert!(
        nan.contains("OSD 1: NaN: must be a positive number of Mbit/s"),
        "{nan}"
    );
    let delay = e(&[Shaping {
        rate_mbit: 10.0,
        delay_ms: -1.0,
    }]);
    assert!(
        delay.contains("-1: must be a finite number of ms >= 0"),
        "{delay}"
    );
    for line in [one, nan, delay] {
        assert!(!line.contains('\n'), "{line}");
    }
}
