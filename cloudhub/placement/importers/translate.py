"""Documents in, EdgePlacements out: each document goes to its source system's translator."""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from cloudhub.placement.errors import InvalidSpec, TranslationError
from cloudhub.placement.importers import karmada, kubeedge, openyurt, superedge
from cloudhub.placement.importers.common import (
    GROUP_LABEL,
    PASSIVE_KINDS,
    SHAPE_ERRORS,
    Context,
    Doc,
    ImportResult,
    load_documents,
    ref,
)

__all__ = ["import_documents", "import_files"]

_HANDLERS = {**karmada.HANDLERS, **kubeedge.HANDLERS, **openyurt.HANDLERS, **superedge.HANDLERS}


def import_files(paths: Iterable[str | pathlib.Path], **options: Any) -> list[ImportResult]:
    """Read files and translate their documents together (see :func:`import_documents`).

    Raises:
        TranslationError: a file cannot be read or parsed.
    """
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        path = pathlib.Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TranslationError(str(path), f"cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise TranslationError(str(path), f"not UTF-8 text: {exc.reason}") from exc
        docs.extend(load_documents(text, str(path)))
    return import_documents(docs, **options)


def import_documents(
    documents: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    group_label: str = GROUP_LABEL,
    cluster_labels: Mapping[str, Mapping[str, str]] | None = None,
    namespace: str = "default",
) -> list[ImportResult]:
    """Translate placement documents into EdgePlacements.

    Args:
        documents: ``(source, object)`` pairs, e.g. from :func:`load_documents`.
            Workloads (Deployments, DaemonSets) among them are used as the
            templates Karmada policies select; they yield no result of their own.
        group_label: the node label that names Karmada member clusters as groups.
        cluster_labels: labels of Karmada member clusters (``{cluster: {k: v}}``),
            to resolve cluster label selectors in policies and override rules.
        namespace: the namespace of placements whose source has none.

    Returns:
        One result per placement document (and one per unsupported document
        that is not a plain workload or a resource placement leaves alone).
    """
    docs = [Doc(src, copy.deepcopy(dict(obj))) for src, obj in documents]
    ctx = Context(docs, group_label, dict(cluster_labels or {}), namespace)
    results: list[ImportResult] = []
    for doc in docs:
        handler = _HANDLERS.get((doc.group, doc.kind))
        if handler is not None:
            try:
                results.append(handler(ctx, doc))
            except InvalidSpec as exc:
                result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
                result.drop("", f"{exc}; nothing translated")
                results.append(result)
            except SHAPE_ERRORS as exc:
                # Foreign documents are read as their authors' schemas say; a field
                # of another type than the schema's (a list where a map belongs...)
                # is this document's fault: say so and go on with the others.
                result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
                result.drop(
                    "",
                    f"the document does not have the shape of a {doc.kind} "
                    f"({type(exc).__name__}: {exc}); nothing translated",
                )
                results.append(result)
        elif doc.kind in PASSIVE_KINDS:
            continue
        else:
            result = ImportResult(doc.source, doc.kind or "<no kind>", ref(doc, ctx))
            # Whatever it would place (another system's placement, a Job...) is not placed.
            result.drop(
                "kind",
                f"{doc.obj.get('apiVersion')}/{doc.kind} is not a placement document this "
                "importer knows",
            )
            results.append(result)
    return results
