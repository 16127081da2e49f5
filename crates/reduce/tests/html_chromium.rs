//! The tree picture in a real browser: Debian's headless Chromium runs the report's script
//! (`--dump-dom`: the nodes re-coloured by it, the legend, the selector) and draws it (`--screenshot`:
//! the PNG has the nodes' and the legend's colours). Missing Chromium fails under CI=true /
//! ECSTACK_REQUIRE_CLIENTS=1 (scripts/setup.sh installs it) and skips elsewhere.

use ecstack_reduce::{analyze, html, AnalyzeOptions, Config};
use std::io::Read;
use std::path::Path;
use std::process::Command;

fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| ecstack_testkit::tool_runs(c));
    if found.is_none() {
        ecstack_testkit::require("chromium", false, "chromium");
    }
    found
}

fn headless(bin: &str, extra: &[&str], page: &Path) -> std::process::Output {
    let profile = page.with_extension("profile");
    Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox", // tests may run as root
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium")
}

/// A minimal PNG reader (8-bit RGB or RGBA, not interlaced: what Chromium writes) → RGB pixels.
fn png_rgb(data: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut pos, mut idat) = (8usize, Vec::new());
    let (mut w, mut h, mut ct) = (0usize, 0usize, 0u8);
    while pos + 8 <= data.len() {
        let len = u32::from_be_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &data[pos + 4..pos + 8];
        let body = &data[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                h = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!(body[8], 8, "bit depth");
                ct = body[9];
                assert!(ct == 2 || ct == 6, "colour type {ct}");
                assert_eq!(body[12], 0, "interlaced");
            }
            b"IDAT" => idat.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        pos += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let bpp = if ct == 6 { 4 } else { 3 };
    let stride = w * bpp;
    let mut img = vec![0u8; h * stride];
    for y in 0..h {
        let f = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= bpp {
                img[y * stride + x - bpp] as i32
            } else {
                0
            };
            let b = if y > 0 {
                img[(y - 1) * stride + x] as i32
            } else {
                0
            };
            let c = if x >= bpp && y > 0 {
                img[(y - 1) * stride + x - bpp] as i32
            } else {
                0
            };
            let pred = match f {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                _ => panic!("filter {f}"),
            };
            img[y * stride + x] = (line[x] as i32 + pred) as u8;
        }
    }
    let px = img
        .chunks(bpp)
        .map(|p| [p[0], p[1], p[2]])
        .collect::<Vec<_>>();
    (w, h, px)
}

fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap();
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// Where Chromium laid out the labels and the legend: a copy of the page with a script that writes
/// the boxes (`getBoundingClientRect`, CSS pixels) as JSON into the DOM, read back with --dump-dom.
const MEASURE: &str = "<script>\
const box=e=>{const r=e.getBoundingClientRect();return [r.left,r.top,r.right,r.bottom];};\
const out={tree:box(document.getElementById('tree')),labels:[],nodes:{},items:[]};\
for(const c of document.querySelectorAll('#tree circle'))out.nodes[c.dataset.path]=box(c);\
for(const t of document.querySelectorAll('#tree text.label')){const cs=getComputedStyle(t);\
out.labels.push({path:t.dataset.path,text:t.textContent,box:box(t),\
shown:cs.display!=='none'&&cs.visibility==='visible'&&+cs.opacity>0,font:parseFloat(cs.fontSize)});}\
for(const it of document.querySelectorAll('#legend .item')){const k=it.querySelector('.key');\
out.items.push({key:box(k),mark:box(k.firstElementChild),name:box(it.querySelector('.name')),text:it.textContent});}\
const pre=document.createElement('pre');pre.id='measured';pre.textContent=JSON.stringify(out);document.body.appendChild(pre);\
</script>";

/// The rendered layout: every label in `labels` drawn, visible, inside the picture, beside its
/// node and clear of the other labels; every legend key vertically centred on its label, the
/// label right after its key, and the size and saving rows' keys in the same columns.
fn check_layout(bin: &str, page: &Path, labels: &[&str]) {
    let html = std::fs::read_to_string(page).unwrap();
    let copy = page.with_file_name("measure.html");
    std::fs::write(&copy, html.replace("</body>", &format!("{MEASURE}</body>"))).unwrap();
    let o = headless(bin, &["--window-size=1000,1200", "--dump-dom"], &copy);
    let dom = String::from_utf8_lossy(&o.stdout);
    let json = dom
        .split("<pre id=\"measured\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| panic!("measuring script did not run: {dom}"))
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let b = |x: &serde_json::Value| -> [f64; 4] {
        let a = x.as_array().unwrap();
        [0, 1, 2, 3].map(|i| a[i].as_f64().unwrap())
    };
    let mid_y = |r: [f64; 4]| (r[1] + r[3]) / 2.0;
    let tree = b(&v["tree"]);
    let drawn = v["labels"].as_array().unwrap();
    let mut boxes = Vec::new();
    for want in labels {
        let l = drawn
            .iter()
            .find(|l| l["text"] == *want)
            .unwrap_or_else(|| panic!("label {want} not drawn: {json}"));
        let r = b(&l["box"]);
        assert_eq!(l["shown"], true, "{l}");
        assert!(l["font"].as_f64().unwrap() >= 9.0, "{l}");
        assert!(r[2] - r[0] > 5.0 && r[3] - r[1] > 5.0, "empty label {l}");
        assert!(
            r[0] >= tree[0] && r[1] >= tree[1] && r[2] <= tree[2] && r[3] <= tree[3],
            "label {l} outside the picture {tree:?}"
        );
        // Beside its node: level with its centre, a few pixels from its edge.
        let n = b(&v["nodes"][l["path"].as_str().unwrap()]);
        assert!((mid_y(r) - mid_y(n)).abs() <= 3.0, "{l} vs node {n:?}");
        let gap = (r[0] - n[2]).max(n[0] - r[2]);
        assert!(
            (0.0..=8.0).contains(&gap),
            "{l} is {gap} px from its node {n:?}"
        );
        boxes.push(r);
    }
    for (i, p) in boxes.iter().enumerate() {
        for q in &boxes[i + 1..] {
            let overlap = p[0] < q[2] && q[0] < p[2] && p[1] < q[3] && q[1] < p[3];
            assert!(!overlap, "labels overlap: {p:?} {q:?}");
        }
    }
    // The legend: 5 size keys, then 6 saving keys.
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 5 + 6, "{json}");
    for it in items {
        let (key, mark, name) = (b(&it["key"]), b(&it["mark"]), b(&it["name"]));
        assert!(
            (mid_y(mark) - mid_y(name)).abs() <= 1.5,
            "legend key not level with its label: {it}"
        );
        assert!((mid_y(mark) - mid_y(key)).abs() <= 1.0, "{it}");
        let after = name[0] - key[2];
        assert!(
            (0.0..=10.0).contains(&after),
            "label {after} px from its key: {it}"
        );
    }
    for (size, saving) in items[..5].iter().zip(&items[5..]) {
        let (a, c) = (b(&size["key"]), b(&saving["key"]));
        assert!((a[0] - c[0]).abs() <= 0.5, "columns: {size} above {saving}");
        assert!(c[1] > a[3] - 0.5, "the saving row is below the size row");
    }
}

#[test]
fn tree_picture_in_headless_chromium() {
    let Some(bin) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    // zeros/: saves ~100% (dark red); noise/: nothing (white); text/deep/: in between (orange).
    for d in ["zeros", "noise", "text/deep"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("zeros/z.bin"), vec![0u8; 300_000]).unwrap();
    let mut noise = vec![0u8; 300_000];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(root.join("noise/n.bin"), &noise).unwrap();
    // Random letters from 16: compresses to about half.
    let text: Vec<u8> = noise
        .iter()
        .map(|b| b"abcdefghijklmnop"[(b & 15) as usize])
        .collect();
    std::fs::write(root.join("text/deep/t.txt"), &text).unwrap();
    let out = dir.path().join("res");
    analyze(&AnalyzeOptions {
        root: root.clone(),
        out: out.clone(),
        config: Config {
            workers: 1,
            compression: vec!["zstd:3@64K".into()],
            dedup: vec!["static:4K:sha1".into()],
            ..Config::default()
        },
        config_path: None,
        workers_max: Some(1),
        shard: None,
        sample_fraction: 1.0,
        sample_bytes: None,
        progress: false,
    })
    .unwrap();
    let page = dir.path().join("tree.html");
    let drawn = html::write_html(&out, &page, 100).unwrap();
    // ".", noise, text, text/deep, zeros.
    assert_eq!(drawn, 5);
    let rep = ecstack_reduce::report(&out, &Default::default()).unwrap();
    let dir_saving = |name: &str| {
        let d = rep.directories.iter().find(|d| d.name == name).unwrap();
        1.0 - d.reduced_bytes[0] as f64 / d.bytes as f64
    };
    let (s_zeros, s_noise, s_text) = (
        dir_saving("zeros"),
        dir_saving("noise"),
        dir_saving("text/deep"),
    );
    assert!(s_zeros > 0.99 && s_noise < 0.005 && (0.2..0.5).contains(&s_text));

    // The DOM after the script ran: every node painted by the script's colour(), the legend there.
    let o = headless(bin, &["--dump-dom"], &page);
    let dom = String::from_utf8_lossy(&o.stdout);
    assert!(
        dom.contains("id=\"tree\""),
        "no picture in the DOM: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let circles: Vec<&str> = dom.split("<circle").skip(1).collect();
    // 5 legend size circles + 5 nodes.
    assert_eq!(circles.len(), 5 + drawn, "{dom}");
    // The saving each node carries (first configuration), as the script reads it.
    let node_saving = |path: &str| -> f64 {
        let c = circles
            .iter()
            .find(|c| c.contains(&format!("data-path=\"{path}\"")))
            .unwrap_or_else(|| panic!("node {path} not drawn"));
        let s: f64 = c
            .split("data-s=\"")
            .nth(1)
            .unwrap()
            .split([',', '"'])
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            c.contains(&format!("fill=\"{}\"", html::colour(s))),
            "{path}: {c}"
        );
        // The script rewrote the tooltip with the saving.
        assert!(c.contains("saving"), "{c}");
        s
    };
    // The nodes carry the report's savings (rounded to 4 decimals).
    assert!((node_saving("zeros") - s_zeros).abs() < 1e-4);
    assert!((node_saving("text/deep") - s_text).abs() < 1e-4);
    let (s_zeros, s_noise, s_text) = (
        node_saving("zeros"),
        node_saving("noise"),
        node_saving("text/deep"),
    );
    assert!(s_zeros > 0.99 && s_noise < 0.005 && (0.2..0.5).contains(&s_text));
    for label in [
        "tiny (&lt; 1 KiB)",
        "small (KiBs)",
        "huge (TiBs and up)",
        "<b>saving</b>",
        "zstd:3@64K",
        "static:4K:sha1",
    ] {
        assert!(dom.contains(label), "legend/selector lacks {label}");
    }

    // The largest directories are labelled on the page (visible text, not only in tooltips), the
    // root by its name.
    for (path, text) in [
        (".", "tree"),
        ("zeros", "zeros"),
        ("noise", "noise"),
        ("text/deep", "text/deep"),
    ] {
        let tag = format!("data-path=\"{path}\">{text}</text>");
        assert!(dom.contains(&tag), "no label {text} for {path}: {dom}");
    }
    // A directory without files of its own ("text") has no label.
    assert!(!dom.contains("data-path=\"text\">"), "{dom}");
    check_layout(bin, &page, &["tree", "zeros", "noise", "text/deep"]);

    // The picture itself: the nodes' fills and the legend's swatches are on screen.
    let shot = dir.path().join("tree.png");
    let o = headless(
        bin,
        &[
            "--window-size=1000,1200",
            &format!("--screenshot={}", shot.display()),
        ],
        &page,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    if let Ok(keep) = std::env::var("ECSTACK_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let (w, h, px) = png_rgb(&png);
    assert_eq!((w, h), (1000, 1200));
    let count = |c: [u8; 3]| px.iter().filter(|p| **p == c).count();
    // Node interiors (radius 5: small class) are exact fills: a few dozen pixels each.
    for (what, s) in [("zeros node", s_zeros), ("text/deep node", s_text)] {
        let n = count(rgb(&html::colour(s)));
        assert!(n >= 20, "{what}: {n} pixels of {}", html::colour(s));
    }
    // Legend swatches (14x14 each), hot and cold.
    for s in [0.02, 0.08, 0.2, 0.5, 0.9] {
        let n = count(rgb(&html::colour(s)));
        assert!(
            n >= 100,
            "legend swatch {s}: {n} pixels of {}",
            html::colour(s)
        );
    }
}
