//! Tests for the `nvidia-smi -q -x` reader: the corpus host's XML (driver 580, two H200s), an
//! older layout with single/double bit ECC and throttle reasons, and broken documents.

use super::*;

const XML: &[u8] = include_bytes!("../../../tests/data/snapshots/nvidia-smi-q.xml");

#[test]
fn corpus_two_h200s() {
    let s = parse(XML).unwrap();
    assert_eq!(s.driver.as_deref(), Some("580.159.04"));
    assert_eq!(s.cuda.as_deref(), Some("13.0"));
    assert_eq!(s.gpus.len(), 2);
    let g = &s.gpus[1];
    assert_eq!(g.product, "NVIDIA H200");
    assert_eq!(g.index, Some(1));
    assert_eq!(g.pci_bus_id, "00000000:00:07.0");
    assert_eq!(g.uuid, "GPU-bfdd9d7b-ada8-3ccc-bc4a-cded0e4bf0cc");
    assert_eq!(g.memory_total, Some(143771 << 20));
    assert_eq!(g.memory_used, Some(0));
    assert_eq!((g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable), (0, 0));
    assert_eq!(g.retired_pages, 0);
    assert!(!g.remap_pending_or_failed);
    assert!(g.temperature_c.is_some());
    assert!(g.throttle.is_empty(), "{:?}", g.throttle);
    let h = s.highlights();
    assert!(h[0].starts_with("GPU 0 H200 (00000000:00:06.0): 0.0/140.4 GiB used, 0 uncorrectable ECC, 34 C"), "{}", h[0]);
}

const OLD: &str = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
  <driver_version>470.82.01</driver_version>
  <gpu id="00000000:3B:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name>
    <uuid>GPU-1</uuid>
    <minor_number>3</minor_number>
    <pci><pci_bus_id>00000000:3B:00.0</pci_bus_id></pci>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_hw_thermal_slowdown>Active</clocks_throttle_reason_hw_thermal_slowdown>
    </clocks_throttle_reasons>
    <fb_memory_usage><total>32510 MiB</total><used>31000 MiB</used></fb_memory_usage>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>5</device_memory><total>7</total></single_bit>
        <double_bit><device_memory>2</device_memory><total>2</total></double_bit>
      </volatile>
      <aggregate>
        <single_bit><total>70</total></single_bit>
        <double_bit><total>4</total></double_bit>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>1</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>2</retired_count></double_bit_retirement>
      <pending_retirement>Yes</pending_retirement>
    </retired_pages>
    <temperature><gpu_temp>91 C</gpu_temp></temperature>
    <processes>
      <process_info><pid>4242</pid><type>C</type><process_name>python &amp; co</process_name><used_memory>30990 MiB</used_memory></process_info>
      <process_info><pid>4243</pid><process_name>python</process_name><used_memory>10 MiB</used_memory></process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
"#;

#[test]
fn older_layout_with_errors() {
    let s = parse(OLD.as_bytes()).unwrap();
    let g = &s.gpus[0];
    assert_eq!((g.ecc_volatile_correctable, g.ecc_volatile_uncorrectable), (7, 2));
    assert_eq!((g.ecc_aggregate_correctable, g.ecc_aggregate_uncorrectable), (70, 4));
    assert_eq!((g.retired_pages, g.retired_pending), (3, true));
    assert_eq!(g.throttle, vec!["hw_thermal_slowdown"]);
    assert_eq!(
        g.processes,
        vec![
            GpuProcess { pid: Some(4242), name: "python & co".into(), used_bytes: Some(30990 << 20) },
            GpuProcess { pid: Some(4243), name: "python".into(), used_bytes: Some(10 << 20) },
        ]
    );
    assert_eq!(s.highlights(), vec![
        "GPU 3 Tesla V100-SXM2-32GB (00000000:3B:00.0): 30.3/31.7 GiB used, 4 uncorrectable ECC, 91 C, 3 retired pages (pending), throttled: hw_thermal_slowdown, processes: 4242 python & co, 4243 python",
    ]);
}

#[test]
fn broken_documents() {
    assert!(parse(b"").unwrap_err().to_string().contains("no <nvidia_smi_log>"));
    assert!(parse(b"<html><body/></html>").unwrap_err().to_string().contains("not <nvidia_smi_log>"));
    assert!(parse(b"\xff\xfe<").unwrap_err().to_string().contains("not UTF-8"));
    let e = parse(&XML[..XML.len() / 2]).unwrap_err().to_string();
    assert!(e.contains("syntax error") || e.contains("truncated"), "{e}");
    // Cut right after a closing tag: the open elements are named.
    let cut = XML[..XML.len() / 2].iter().rposition(|b| *b == b'>').unwrap() + 1;
    let e = parse(&XML[..cut]).unwrap_err().to_string();
    assert!(e.contains("truncated inside <nvidia_smi_log/gpu"), "{e}");
    assert!(parse(b"<nvidia_smi_log><gpu></nvidia_smi_log>").is_err());
    for cut in (0..OLD.len()).step_by(7) {
        let _ = parse(&OLD.as_bytes()[..cut]);
    }
}
