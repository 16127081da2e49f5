//! The RESP parser on arbitrary bytes: it never panics, never claims more bytes than it was given,
//! and what it parses re-encodes (as a multibulk array) to bytes that parse to the same arguments.
//! Valid commands, whole or cut anywhere, parse to themselves or to "need more bytes".

use ecstack_kv::resp::parse_command;
use proptest::prelude::*;

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Some((args, used))) = parse_command(&bytes, 1 << 20) {
            prop_assert!(used > 0 && used <= bytes.len());
            if !args.is_empty() {
                let again = encode(&args);
                let (back, n) = parse_command(&again, 1 << 20).unwrap().unwrap();
                prop_assert_eq!(back, args);
                prop_assert_eq!(n, again.len());
            }
        }
    }

    #[test]
    fn resp_shaped_bytes(parts in proptest::collection::vec(
        prop_oneof![Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()), Just(b"-1".to_vec()),
                    Just(b"3".to_vec()), Just(b"99999999999999999999".to_vec()), Just(b"GET".to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..4)], 0..30)) {
        let bytes: Vec<u8> = parts.concat();
        let _ = parse_command(&bytes, 1 << 16);
    }

    #[test]
    fn valid_commands_cut_anywhere(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
                                   cut in 0usize..400) {
        let bytes = encode(&args);
        let (back, n) = parse_command(&bytes, 1 << 20).unwrap().unwrap();
        prop_assert_eq!(&back, &args);
        prop_assert_eq!(n, bytes.len());
        let cut = cut % bytes.len();
        prop_assert_eq!(parse_command(&bytes[..cut], 1 << 20), Ok(None));
    }
}
