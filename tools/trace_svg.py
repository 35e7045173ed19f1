#!/usr/bin/env python3
"""One call of a kiln trace (`KILN_PROFILE=trace.json`, `Function::write_trace`) as an SVG
timeline, for a README or a review where opening Perfetto is one step too many:

    python3 tools/trace_svg.py trace.json out.svg [--call K] [--width PX]

Each step of the call is a bar on its thread's row, as long as it ran, coloured by its kind
(products, maps, row groups, ...), labelled where the bar is wide enough and with its name,
time and shapes as a tooltip; a legend gives each kind's share of the call. The call drawn is the K-th (0 is the first; default: the call
of median length among the second half, past the warm-up). Only Python's standard library.
"""

import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

# The first word of a step's name (`gemm matmul -> %7 at model.rs:12`) and the kind the text
# profile groups it under, each with a colour that stays apart from its neighbours.
KINDS = {
    "gemm": ("products", "#4e79a7"), "rows": ("row groups", "#f28e2b"),
    "map": ("maps", "#59a14f"), "reduce": ("reductions", "#e15759"),
    "view": ("views", "#bab0ac"), "perform": ("host steps", "#b07aa1"),
    "ifelse": ("control", "#edc948"), "scan": ("control", "#edc948"),
}
OTHER = "#9c755f"
ROW_HEIGHT = 28
LEFT = 110
TOP = 34


def kind_of(name):
    """The step's kind and colour, from its name's first word."""
    return KINDS.get(name.split(" ", 1)[0], (name.split(" ", 1)[0], OTHER))


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    calls = sorted((e for e in spans if e.get("cat") == "call"), key=lambda e: e["ts"])
    steps = [e for e in spans if e.get("cat") == "step"]
    return threads, calls, steps


def pick(calls, which):
    if not calls:
        sys.exit("trace_svg.py: the trace has no calls (was the function profiled and called?)")
    if which is not None:
        if not 0 <= which < len(calls):
            sys.exit(f"trace_svg.py: --call {which}: the trace has {len(calls)} calls")
        return calls[which]
    later = sorted(calls[len(calls) // 2:], key=lambda e: e["dur"])
    return later[len(later) // 2]


def svg(call, steps, threads, width):
    start, dur = call["ts"], max(call["dur"], 1e-3)
    # A call's steps run on its caller's thread (products and kernels share their work out
    # inside a step); another thread's call at the same time is another picture.
    inside = [s for s in steps
              if s["tid"] == call["tid"] and start <= s["ts"] <= start + dur]
    tracks = [call["tid"]]
    scale = (width - LEFT - 10) / dur
    kinds = {kind_of(s["name"]) for s in inside}
    height = TOP + ROW_HEIGHT * len(tracks) + 42 + 18 * ((len(kinds) + 3) // 4)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="16" font-size="13">{escape(call["name"])}: '
           f'{dur / 1e3:.3f} ms, {len(inside)} steps</text>']
    for i, tid in enumerate(tracks):
        y = TOP + i * ROW_HEIGHT
        out.append(f'<text x="4" y="{y + 17}">{escape(threads.get(tid, f"thread {tid}"))}</text>')
        out.append(f'<rect x="{LEFT}" y="{y}" width="{dur * scale:.1f}" height="{ROW_HEIGHT - 4}" '
                   f'fill="#f4f4f4"/>')
    # A tick every 1, 2 or 5 times a power of ten, about ten of them across.
    tick = 10 ** math.floor(math.log10(dur / 10))
    tick *= next(m for m in (1, 2, 5, 10) if dur / (tick * m) <= 10)
    axis = TOP + ROW_HEIGHT * len(tracks)
    for k in range(int(dur // tick) + 1):
        x = LEFT + k * tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{axis - 4}" x2="{x:.1f}" y2="{axis}" stroke="#666"/>')
        out.append(f'<text x="{x:.1f}" y="{axis + 9}" font-size="9" text-anchor="middle" '
                   f'fill="#666">{k * tick / 1e3:g} ms</text>')
    total = {}
    for s in inside:
        kind, colour = kind_of(s["name"])
        total[(kind, colour)] = total.get((kind, colour), 0) + s["dur"]
        y = TOP + tracks.index(s["tid"]) * ROW_HEIGHT
        x, w = LEFT + (s["ts"] - start) * scale, max(s["dur"] * scale, 0.5)
        tip = f'{s["name"]}: {s["dur"]:.1f} us {s.get("args", {}).get("shapes", "")}'
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW_HEIGHT - 4}" '
                   f'fill="{colour}" stroke="white" stroke-width="0.5">'
                   f'<title>{escape(tip)}</title></rect>')
        # The op (`matmul`, `(exp, sum)`) where the bar has room for it.
        label = s["name"].split(" at ", 1)[0].split(" -> ", 1)[0].split(" ", 1)[-1]
        if w > 6.5 * len(label) + 6:
            out.append(f'<text x="{x + 3:.1f}" y="{y + 16}" fill="white">{escape(label)}</text>')
    y = TOP + ROW_HEIGHT * len(tracks) + 26
    for i, ((kind, colour), us) in enumerate(sorted(total.items(), key=lambda kv: -kv[1])):
        x, row = LEFT + (i % 4) * 170, y + (i // 4) * 18
        out.append(f'<rect x="{x}" y="{row - 10}" width="12" height="12" '
                   f'fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{row}">{escape(kind)} {100 * us / dur:.1f}%</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("out")
    parser.add_argument("--call", type=int)
    parser.add_argument("--width", type=int, default=1000)
    args = parser.parse_args()
    threads, calls, steps = load(args.trace)
    call = pick(calls, args.call)
    with open(args.out, "w") as f:
        f.write(svg(call, steps, threads, args.width))


if __name__ == "__main__":
    main()
