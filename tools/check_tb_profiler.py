#!/usr/bin/env python3
"""Load a gpuperf trace with TensorBoard's PyTorch Profiler plugin (torch-tb-profiler),
as its Run loader does for each *.pt.trace.json, and print what its views find, one
JSON line after "TB_JSON ": the steps, the overview's DataLoader time, the memory
view's devices and peaks, the views offered. Exits 1 when the plugin fails to parse.

    python3 tools/check_tb_profiler.py TRACE.json
"""
import json
import logging
import sys
import tempfile
import warnings


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # the plugin logs overlapping ranges per event
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    with tempfile.TemporaryDirectory() as cache:
        parsed = RunProfileData.parse("worker0", None, sys.argv[1], cache)
        data = parsed[0] if isinstance(parsed, tuple) else parsed
        data.process()
        data.analyze()
        profile = RunGenerator("worker0", None, data).generate_run_profile()
    perf = profile.overview["performance"][0] if profile.overview else {}
    parts = {c["name"]: c["value"] for c in perf.get("children", [])}
    peaks = {}
    if data.memory_snapshot:
        for (dev_type, dev_id), peak in data.memory_snapshot.get_peak_memory().items():
            peaks["%s:%s" % (int(dev_type) if dev_type is not None else "none", dev_id)] = peak
    out = {
        "steps": len(data.steps_costs),
        "step_us": perf.get("value", 0),
        "dataloader_us": parts.get("DataLoader", 0),
        "memory_peaks": peaks,
        "views": [v.name for v in profile.views],
        "device_props": data.device_props or [],
        "recommendations": len(data.recommendations),
    }
    print("TB_JSON " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
