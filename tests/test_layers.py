"""No import circle inside rag/ (the layer contracts themselves run in `make lint`: lint-imports, pyproject.toml)."""

from __future__ import annotations

import grimp


def import_circles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, str]]:
    """Pairs (a, b) where a imports b directly and b leads back to a."""
    circles = []
    for module in sorted(graph.find_descendants(package)):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith(package + ".") and graph.chain_exists(imported, module):
                circles.append((module, imported))
    return circles


def test_no_import_circle_in_the_core() -> None:
    graph = grimp.build_graph("rag")
    assert import_circles(graph, "rag") == []


def test_a_circle_is_found() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert import_circles(graph, "pkg") == [("pkg.a", "pkg.b"), ("pkg.b", "pkg.a")]
