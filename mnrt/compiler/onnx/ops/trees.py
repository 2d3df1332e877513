"""Tree ensembles (ai.onnx.ml's TreeEnsemble, and TreeEnsembleRegressor and -Classifier as
sklearn-onnx writes a random forest or gradient boosting) as matrix products, the way a
matrix unit runs them (Hummingbird's GEMM strategy): every interior node's feature is gathered and
compared with its split (a 0/1 decision per node), each tree's decisions times a constant
+1/-1 path matrix count, for every leaf, the turns its path takes that went its way, and
the one leaf whose count is its path's length is the one reached; those 0/1 indicators
times the leaves' values are the trees' outputs. Every matrix is worked out at import from
the attributes; nothing branches on the device."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported

# The comparisons of nodes_modes (TreeEnsemble's numbering; the older ops' names map here).
_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
          "BRANCH_MEMBER")  # fmt: skip
_COMPARE = ("less_equal", "less", "greater_equal", "greater", "equal", "equal")
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
# Interior nodes times leaves of every tree, padded to the largest: what the path matrix
# holds (a forest of 100 trees of depth 8 holds 6.5 million).
_MAX_PATH_ENTRIES = 1 << 25


@dataclass
class _Forest:
    """Interior nodes (feature, split, mode, whether a missing value goes the true way,
    the members of a set-membership node), and each tree as the interior nodes it holds
    and its leaves, each leaf its value per target and the path to it ((node, went true))."""

    features: list[int] = field(default_factory=list)
    splits: list[float] = field(default_factory=list)
    modes: list[int] = field(default_factory=list)
    tracks: list[int] = field(default_factory=list)
    members: list[list[float]] = field(default_factory=list)
    trees: list[tuple[list[int], list[tuple[np.ndarray, list[tuple[int, bool]]]]]] = field(
        default_factory=list
    )


def _walk(forest: _Forest, root: Any, child: Any, leaf_value: Any) -> None:
    """Add the tree from `root` (`child(node, side)`: the node or ("leaf", id) a branch
    leads to; `leaf_value(id)`: its value per target)."""
    nodes: list[int] = []
    seen: set[int] = set()
    leaves: list[tuple[np.ndarray, list[tuple[int, bool]]]] = []
    stack = [(root, [])]
    while stack:
        at, path = stack.pop()
        if isinstance(at, tuple):
            leaves.append((leaf_value(at[1]), path))
            continue
        if len(path) > 64 or at in seen:
            raise Invalid("a tree's branches loop or run deeper than 64 nodes")
        nodes.append(at)
        seen.add(at)
        stack.append((child(at, False), [*path, (at, False)]))
        stack.append((child(at, True), [*path, (at, True)]))
    forest.trees.append((nodes, leaves))


def tree_ensemble(cx: Ctx, node: Any, at: Attrs) -> list:
    """TreeEnsemble (ai.onnx.ml opset 5)."""
    splits = _floats(at, "nodes_splits")
    features = [int(v) for v in at.get("nodes_featureids") or []]
    modes = _modes(at)
    true_ids, false_ids = at.get("nodes_truenodeids"), at.get("nodes_falsenodeids")
    true_leaf, false_leaf = at.get("nodes_trueleafs"), at.get("nodes_falseleafs")
    count = len(features)
    tracks = _tracks(at, count, (splits, modes, true_ids, false_ids, true_leaf, false_leaf))
    weights = _floats(at, "leaf_weights")
    targets = [int(v) for v in at.get("leaf_targetids") or []]
    n_targets = int(at.get("n_targets", 1))
    if len(weights) != len(targets) or any(not 0 <= t < n_targets for t in targets):
        raise Invalid(f"leaf_weights and leaf_targetids must pair up, targets in [0, {n_targets})")
    at.get("nodes_hitrates")
    members = _membership(_floats(at, "membership_values"), modes)
    forest = _Forest(features, [float(s) for s in splits], modes, tracks,
                     members)  # fmt: skip

    def child(n: int, side: bool) -> Any:
        ids, leafs = (true_ids, true_leaf) if side else (false_ids, false_leaf)
        target = int(ids[n])
        bound = len(weights) if leafs[n] else count
        if not 0 <= target < bound:
            raise Invalid(f"node {n}'s {'true' if side else 'false'} branch {target} is out "
                          "of range")  # fmt: skip
        return ("leaf", target) if leafs[n] else target

    def value(leaf: int) -> np.ndarray:
        v = np.zeros(n_targets)
        v[targets[leaf]] = weights[leaf]
        return v

    for root in at.get("tree_roots") or []:
        root = int(root)
        if not 0 <= root < count:
            raise Invalid(f"tree root {root} is not a node")
        single = true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]
        _walk(forest, ("leaf", int(true_ids[root])) if single else root, child, value)
    code = int(at.get("aggregate_function", 1))
    aggregate = _aggregate(_AGGREGATES[code] if 0 <= code < len(_AGGREGATES) else str(code))
    transform = int(at.get("post_transform", 0))
    if transform:
        raise Unsupported(f"post_transform={transform} (only NONE, 0)")
    x = cx.sym(node.input[0])
    return [_predict(cx, x, forest, n_targets, aggregate, np.zeros(n_targets))]


def tree_ensemble_regressor(cx: Ctx, node: Any, at: Attrs) -> list:
    """TreeEnsembleRegressor (ai.onnx.ml opsets 1 and 3)."""
    n_targets = int(at.get("n_targets", 1))
    forest = _listed_forest(at, "target", n_targets)
    aggregate = _aggregate(at.get("aggregate_function", "SUM"))
    transform = at.get("post_transform", "NONE")
    if transform != "NONE":
        raise Unsupported(f"post_transform={transform}")
    base = _base(at, n_targets)
    return [_predict(cx, cx.sym(node.input[0]), forest, n_targets, aggregate, base)]


def tree_ensemble_classifier(cx: Ctx, node: Any, at: Attrs) -> list:
    """TreeEnsembleClassifier (ai.onnx.ml opsets 1 and 3): the classes' scores summed over
    the trees (a binary model's one class s as [-s, s] before its transform, as ONNX's
    reference and onnxruntime agree; raw, they do not, and it is refused), transformed
    (NONE, LOGISTIC or SOFTMAX), and the label of the largest, from the integer labels."""
    if at.get("classlabels_strings"):
        raise Unsupported("classlabels_strings: the device holds no strings (label with ints)")
    labels = [int(v) for v in at.get("classlabels_int64s") or []]
    if len(labels) < 2:
        raise Invalid(f"{len(labels)} class labels: a classifier needs two at least")
    forest = _listed_forest(at, "class", len(labels))
    transform = at.get("post_transform", "NONE")
    if transform not in ("NONE", "LOGISTIC", "SOFTMAX"):
        raise Unsupported(f"post_transform={transform}")
    x = cx.sym(node.input[0])
    scores = _predict(cx, x, forest, len(labels), "SUM", _base(at, len(labels)))
    if cx.dtype(scores).name != "float":
        scores = cx.op("cast", scores, to="float")
    if len(set(at.get("class_ids") or [])) == 1:
        if len(labels) != 2 or int(at.get("class_ids")[0]) != 0:
            raise Unsupported("a model that scores one class but class 0 of two")
        if transform == "NONE":
            raise Unsupported(
                "a binary model's raw scores (post_transform=NONE): ONNX's reference gives "
                "[1 - s, s] and onnxruntime [-s, s] (labelling by s > 0); export it with "
                "LOGISTIC"
            )
        one = cx.op("slice", scores, starts=[0], ends=[1], axes=[1])
        scores = cx.op("concat", cx.op("neg", one), one, axis=1)
    if transform == "LOGISTIC":
        scores = cx.op("sigmoid", scores)
    elif transform == "SOFTMAX":
        scores = cx.op("softmax", scores, axis=1)
    best = cx.op("argmax", scores, axis=1, keepdims=False, select_last_index=False)
    return [cx.op("gather", cx.param(np.asarray(labels, np.int64)), best, axis=0), scores]


def _base(at: Attrs, count: int) -> np.ndarray:
    base = _floats(at, "base_values")
    if len(base) not in (0, count):
        raise Invalid(f"base_values holds {len(base)} values for {count} outputs")
    return np.asarray(base, np.float64) if len(base) else np.zeros(count)


def _listed_forest(at: Attrs, prefix: str, n_targets: int) -> _Forest:
    """The trees of TreeEnsembleRegressor or TreeEnsembleClassifier: nodes named by (tree
    id, node id), leaves being nodes of mode LEAF, and each leaf's weights per target (or
    class) listed apart, under `prefix` (target_ids, target_weights; class_ids, ...)."""
    tree_ids = [int(v) for v in at.get("nodes_treeids") or []]
    node_ids = [int(v) for v in at.get("nodes_nodeids") or []]
    features = [int(v) for v in at.get("nodes_featureids") or []]
    values = _floats(at, "nodes_values")
    names = at.get("nodes_modes") or []
    true_ids, false_ids = at.get("nodes_truenodeids"), at.get("nodes_falsenodeids")
    count = len(tree_ids)
    tracks = _tracks(at, count, (node_ids, features, values, names, true_ids, false_ids))
    _floats(at, "nodes_hitrates")
    modes = [_mode(m) for m in names]
    where = {(t, n): i for i, (t, n) in enumerate(zip(tree_ids, node_ids))}
    leaf_values: dict[int, np.ndarray] = {}
    weights = _floats(at, f"{prefix}_weights")
    keys = [f"{prefix}_treeids", f"{prefix}_nodeids", f"{prefix}_ids"]
    listed = [at.get(k) or [] for k in keys]
    if any(len(v) != len(weights) for v in listed):
        raise Invalid(f"{', '.join(keys)} and {prefix}_weights must pair up")
    for t, n, k, w in zip(*listed, weights):
        i = where.get((int(t), int(n)))
        if i is None or modes[i] != -1 or not 0 <= int(k) < n_targets:
            raise Invalid(f"{prefix} weight of tree {t} node {n} ({prefix} {k}) names no leaf")
        leaf_values.setdefault(i, np.zeros(n_targets))[int(k)] += w
    forest = _Forest(features, [float(v) for v in values], modes, tracks,
                     [[] for _ in modes])  # fmt: skip

    def child(i: int, side: bool) -> Any:
        j = where.get((tree_ids[i], int((true_ids if side else false_ids)[i])))
        if j is None:
            raise Invalid(f"node {node_ids[i]} of tree {tree_ids[i]} branches to no node")
        return ("leaf", j) if modes[j] == -1 else j

    def value(i: int) -> np.ndarray:
        return leaf_values.get(i, np.zeros(n_targets))

    children = {(tree_ids[i], int(v)) for i in range(count) if modes[i] != -1
                for v in (true_ids[i], false_ids[i])}  # fmt: skip
    for tree in dict.fromkeys(tree_ids):
        roots = [
            i for i, t in enumerate(tree_ids) if t == tree and (t, node_ids[i]) not in children
        ]
        if len(roots) != 1:
            raise Invalid(f"tree {tree} has {len(roots)} roots")
        (root,) = roots
        _walk(forest, ("leaf", root) if modes[root] == -1 else root, child, value)
    return forest


def _tracks(at: Attrs, count: int, lists: tuple) -> list[int]:
    """Each node's missing-value direction (false where not given), once every nodes_*
    list is checked to describe all `count` nodes."""
    tracks = [int(t) for t in at.get("nodes_missing_value_tracks_true") or [0] * count]
    if any(v is None or len(v) != count for v in (*lists, tracks)):
        raise Invalid(f"the nodes_* attributes must all have {count} entries")
    return tracks


def _aggregate(name: str) -> str:
    """SUM and AVERAGE: a sum over the trees, which one GEMM of every tree's reached leaf
    gives; MIN and MAX (a tree that reaches no leaf of a target leaves it out) are refused."""
    if name not in _AGGREGATES:
        raise Invalid(f"aggregate_function={name}")
    if name not in ("SUM", "AVERAGE"):
        raise Unsupported(f"aggregate_function={name} (SUM and AVERAGE only)")
    return name


def _mode(name: Any) -> int:
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name == "LEAF":
        return -1
    if name not in _MODES:
        raise Invalid(f"node mode {name}")
    return _MODES.index(name)


def _floats(at: Attrs, name: str) -> list[float]:
    """A float attribute as a list: a list, a tensor (TreeEnsemble's), or the list's
    `_as_tensor` twin (TreeEnsembleRegressor from opset 3)."""
    from onnx import TensorProto, numpy_helper

    twin = at.get(f"{name}_as_tensor")
    value = at.get(name)
    if twin is not None and value:
        raise Invalid(f"{name} and {name}_as_tensor are both given")
    value = twin if twin is not None else value
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value).astype(np.float64).reshape(-1).tolist()
    return [float(v) for v in value or []]


def _modes(at: Attrs) -> list[int]:
    """TreeEnsemble's nodes_modes: a uint8 tensor attribute."""
    from onnx import numpy_helper

    tensor = at.get("nodes_modes")
    values = [] if tensor is None else numpy_helper.to_array(tensor).reshape(-1).tolist()
    if any(not 0 <= int(v) < len(_MODES) for v in values):
        raise Invalid(f"nodes_modes {values}: each 0 to {len(_MODES) - 1}")
    return [int(v) for v in values]


def _membership(values: list[float], modes: list[int]) -> list[list[float]]:
    """The members of each BRANCH_MEMBER node, in order, NaN-delimited (empty lists for
    the others)."""
    sets: list[list[float]] = [[]]
    for v in values:
        if math.isnan(v):
            sets.append([])
        else:
            sets[-1].append(v)
    sets = sets[:-1] if values and math.isnan(values[-1]) else sets
    wanted = sum(m == 6 for m in modes)
    if wanted and len(sets) != wanted:
        raise Invalid(f"membership_values hold {len(sets)} sets for {wanted} member nodes")
    it = iter(sets)
    return [next(it) if m == 6 else [] for m in modes]


def _predict(cx: Ctx, x: Symbol, forest: _Forest, n_targets: int, aggregate: str,
             base: np.ndarray) -> Symbol:  # fmt: skip
    if len(cx.shape(x)) != 2:
        raise Invalid(f"X has shape {cx.shape(x)}; a tree ensemble takes [N, F]")
    if not cx.dtype(x).is_float:
        x = cx.op("cast", x, to="float")
    n, columns = cx.shape(x)
    if any(not 0 <= f < columns for f in forest.features):
        raise Invalid(f"a node reads a feature beyond X's {columns}")
    if not forest.trees:
        raise Invalid("the ensemble has no trees")
    trees = len(forest.trees)
    width = max(1, max(len(nodes) for nodes, _ in forest.trees))
    leaves = max(len(ls) for _, ls in forest.trees)
    if trees * width * leaves > _MAX_PATH_ENTRIES:
        raise Unsupported(
            f"{trees} trees of up to {width} nodes and {leaves} leaves (the path matrices "
            f"would hold more than {_MAX_PATH_ENTRIES} entries)"
        )

    def const(value: Any, stem: str) -> Symbol:
        return cx.param(np.asarray(value, np.float64), like=x, stem=stem)

    # one 0/1 decision per interior node: went the true way
    index = np.zeros((trees, width), np.int64)
    paths = np.zeros((trees, width, leaves))
    lengths = np.full((trees, 1, leaves), -1.0)  # padding leaves are never reached
    values = np.zeros((trees, leaves, n_targets))
    for t, (nodes, tree_leaves) in enumerate(forest.trees):
        slot = {node: i for i, node in enumerate(nodes)}
        index[t, : len(nodes)] = nodes
        for j, (value, path) in enumerate(tree_leaves):
            for node, went_true in path:
                paths[t, slot[node], j] = 1.0 if went_true else -1.0
            lengths[t, 0, j] = sum(went_true for _, went_true in path)
            values[t, j] = value
    if forest.features:
        picked = cx.op("gather", x, cx.param(np.asarray(forest.features, np.int64)), axis=1)
        decided = _decisions(cx, picked, forest, const)
        arranged = cx.op("gather", decided, cx.param(index.reshape(-1)), axis=1)
        per_tree = cx.op("transpose", cx.reshape(arranged, (n, trees, width)), perm=[1, 0, 2])
        counted = cx.op("gemm", per_tree, const(paths, "tree_paths"))  # [trees, n, leaves]
    else:  # every tree a single leaf
        counted = cx.op("fill", shape=[trees, n, leaves], value=0.0, dtype=cx.dtype(x).name)
    reached = cx.op("cast", cx.op("equal", counted, const(lengths, "tree_depths")),
                    to=cx.dtype(x).name)  # fmt: skip
    scale = 1.0 / trees if aggregate == "AVERAGE" else 1.0
    flat = cx.reshape(cx.op("transpose", reached, perm=[1, 0, 2]), (n, trees * leaves))
    y = cx.op("gemm", flat, const(values.reshape(trees * leaves, n_targets) * scale,
                                  "leaf_values"))  # fmt: skip
    return cx.op("add", y, const(base.reshape(1, -1), "base_values")) if base.any() else y


def _decisions(cx: Ctx, v: Symbol, forest: _Forest, const: Any) -> Symbol:
    """[N, nodes] of 0/1: each node's comparison (by its mode) of its feature with its
    split, or its set membership; a missing (NaN) feature goes the true way where the node
    says so (a comparison with NaN is false, but for NEQ)."""
    modes = np.asarray(forest.modes)
    dtype = cx.dtype(v).name
    total = None
    for m in sorted(set(forest.modes)):
        if m == 6:
            width = max(len(s) for s in forest.members)
            table = np.full((len(modes), width), np.nan)
            for i, s in enumerate(forest.members):
                table[i, : len(s)] = s
            same = cx.op("equal", cx.reshape(v, (*cx.shape(v), 1)), const(table, "members"))
            hit = cx.op("max", cx.op("cast", same, to=dtype), axes=[2], keepdims=False)
        else:
            hit = cx.op("cast", cx.op(_COMPARE[m], v, const(forest.splits, "splits")), to=dtype)
            if m == 5:  # not equal
                hit = cx.op("sub", const(1.0, "one"), hit)
        if len(set(forest.modes)) > 1:
            hit = cx.op("mul", hit, const((modes == m).astype(float), "mode_mask"))
        total = hit if total is None else cx.op("add", total, hit)
    if any(forest.tracks):
        missing = cx.op("cast", cx.op("isnan", v), to=dtype)
        tracked = cx.op("mul", missing, const(np.asarray(forest.tracks, float), "tracks"))
        total = cx.op("maximum", total, tracked)
    return total
