#!/usr/bin/env python3
"""Checks the include graph between source folders against the layering of src/CMakeLists.txt.

Every `#include "myriad/<folder>/..."` in include/myriad/<layer>/, src/<layer>/ and (for cuda)
kernels/ is an edge <layer> -> <folder>. An edge is allowed when <folder> is the layer itself or
one of the layers it may use (ALLOWED below, the same edges target_link_libraries encodes); the
script prints every other edge with the file and line that makes it, then the folder graph, and
exits 1 when there is an upward edge or a cycle. Usage: scripts/check_layers.py [repo root]
"""
import pathlib
import re
import sys

# Each layer and the layers below it that it may include (transitively closed below).
ALLOWED = {
    "core": set(),
    "ops": {"core"},
    "cuda": {"ops", "core"},
    "nn": {"ops", "core"},
    "distributed": {"cuda", "ops", "core"},
    "optim": {"nn", "ops", "core"},
    "parallel": {"distributed", "optim", "nn", "cuda", "ops", "core"},
    "config": {"core"},
    "data": {"core"},
    "train": {"parallel", "distributed", "optim", "nn", "cuda", "ops", "core", "config", "data"},
    "serve": {"train", "parallel", "distributed", "optim", "nn", "cuda", "ops", "core", "config", "data"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"myriad/([a-z_]+)/')


def layer_files(root, layer):
    folders = [root / "include" / "myriad" / layer, root / "src" / layer]
    if layer == "cuda":
        folders.append(root / "kernels")
    for folder in folders:
        if folder.is_dir():
            yield from (p for p in sorted(folder.rglob("*")) if p.suffix in {".h", ".cpp", ".cu", ".cuh"})


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    graph = {layer: set() for layer in ALLOWED}
    violations = []
    for layer, allowed in ALLOWED.items():
        for path in layer_files(root, layer):
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                match = INCLUDE.match(line)
                if not match or match.group(1) == layer:
                    continue
                target = match.group(1)
                graph[layer].add(target)
                if target not in allowed:
                    violations.append(f"{path.relative_to(root)}:{number}: {layer} includes {target} ({line.strip()})")
    # A cycle needs an upward edge given the table, but check the graph itself too.
    cycle = find_cycle(graph)
    for layer in ALLOWED:
        print(f"{layer:12s} -> {', '.join(sorted(graph[layer])) or '(nothing)'}")
    for v in violations:
        print("upward edge:", v)
    if cycle:
        print("cycle:", " -> ".join(cycle))
    if violations or cycle:
        return 1
    print(f"ok: {sum(len(t) for t in graph.values())} folder edges, none upward, no cycle")
    return 0


def find_cycle(graph):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in graph:
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
