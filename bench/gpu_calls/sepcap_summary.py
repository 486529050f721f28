"""One variant's devpath_cost.json as the sepcap lines (bench/gpu_calls/stop51_sepcap.sh, stop54_asks.sh): per stream
kernel the pair ratio, registers plain -> hbf, blocks/SM, spills, identical, link mode; consume's added ns against
the unregistered and the plain build; the summary's consume and Little rows. Usage: sepcap_summary.py VARIANT JSON"""
import json, sys
v, path = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(path))
except Exception as e:
    print(f"{v}: no result ({type(e).__name__}: {e})"); sys.exit(0)
print(f"== {v}: compile {(d.get('compile') or {}).get('status')} in {(d.get('compile') or {}).get('seconds')} s, "
      f"total {d.get('seconds')} s")
for name, p in (d.get("parts") or {}).items():
    if name.startswith("stream_"):
        kh = p.get("kernel_hbf") or {}
        pa = ((p.get("pairs") or {}).get("pair_ratio") or {})
        ln = kh.get("link") or {}
        before = (kh.get("ptxas_before") or {}).get("registers")
        print(f"  {name:15s} {str(p.get('status')):8s} x{pa.get('median') or 0:5.2f} (p10 {pa.get('p10')}, p90 "
              f"{pa.get('p90')}) regs {before}->{kh.get('n_regs')} blocks/SM {p.get('kernel_plain_blocks_per_sm')}->"
              f"{kh.get('blocks_per_sm')} spills {kh.get('n_spills')} identical {p.get('identical')} link "
              f"{ln.get('mode', 'whole')} caps {ln.get('caps')} {ln.get('fallback_reason') or ''}")
    else:
        print(f"  {name:15s} {str(p.get('status')):8s} {str(p.get('detail') or p.get('error') or '')[:200]}")
    if name == "consume":   # against the PLAIN build too: the unregistered instrumented build may cost by itself
        print("  consume added vs plain (idle, one warp/SM): "
              f"{[(p.get(m) or {}).get('added_total_vs_plain_ns') for m in ('idle', 'one_warp_per_sm')]}")
s = d.get("summary") or {}
for k, x in s.items():
    if k.startswith(("consume", "little")):
        print(f"  {k}: {json.dumps(x, default=str)[:240]}")
