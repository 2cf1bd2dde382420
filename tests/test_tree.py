"""The one walk over payload shapes (decent.core.tree): what is a container, the order
leaves are visited in, which leaves fn sees, and that mapping copies containers only."""

from collections import OrderedDict, deque, namedtuple
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from decent.core.messages import PAYLOAD_NODES, Declared, Scalar, Seed
from decent.core.tree import tree_leaves, tree_map

Pair = namedtuple("Pair", "left right")


@dataclass(frozen=True)
class Box:
    first: object
    second: object
    derived: int = field(default=7, init=False)


def nested() -> dict:
    return {"b": [1, (2, 3)], "a": {"z": 4, "y": [5]}, "c": 6}


def test_leaves_are_visited_depth_first_in_insertion_order():
    assert tree_leaves(nested()) == [1, 2, 3, 4, 5, 6]
    seen = []
    tree_map(seen.append, nested())
    assert seen == [1, 2, 3, 4, 5, 6]


def test_map_keeps_the_shape_and_container_types():
    out = tree_map(lambda x: x * 10, nested())
    assert out == {"b": [10, (20, 30)], "a": {"z": 40, "y": [50]}, "c": 60}
    assert list(out) == ["b", "a", "c"]  # key order kept
    assert type(out["b"]) is list and type(out["b"][1]) is tuple


def test_map_builds_new_containers_and_leaves_the_input_alone():
    tree = nested()
    out = tree_map(lambda x: x, tree)
    assert out == tree and out is not tree
    assert out["b"] is not tree["b"] and out["a"]["y"] is not tree["a"]["y"]
    assert tree == {"b": [1, (2, 3)], "a": {"z": 4, "y": [5]}, "c": 6}


def test_a_dict_subclass_comes_back_as_a_plain_dict():
    out = tree_map(lambda x: -x, OrderedDict([("q", 1), ("p", 2)]))
    assert type(out) is dict and list(out.items()) == [("q", -1), ("p", -2)]


def test_namedtuples_are_rebuilt_by_field():
    out = tree_map(lambda x: x + 1, Pair(1, [2, Pair(3, 4)]))
    assert out == Pair(2, [3, Pair(4, 5)]) and type(out) is Pair and type(out.right[1]) is Pair
    assert tree_leaves(Pair(1, [2, Pair(3, 4)])) == [1, 2, 3, 4]


def test_leaves_include_none_and_empty_containers_have_none():
    assert tree_leaves([None, {}, [], ()]) == [None]
    assert tree_map(lambda x: "x", [None, {}, [], ()]) == ["x", {}, [], ()]
    assert tree_leaves(5) == [5] and tree_map(lambda x: x + 1, 5) == 6


def test_dataclasses_are_leaves_unless_listed_as_nodes():
    box = Box(1, [2, 3])
    assert tree_leaves(box) == [box]
    assert tree_map(lambda x: "leaf", {"k": box}) == {"k": "leaf"}
    # as a node: its init fields in declaration order (not ``derived``)
    assert tree_leaves(box, nodes=(Box,)) == [1, 2, 3]
    out = tree_map(lambda x: x * 2, box, nodes=(Box,))
    assert out == Box(2, [4, 6]) and type(out) is Box and out.derived == 7
    assert box == Box(1, [2, 3])


def test_leaf_type_picks_what_fn_sees_and_keeps_the_rest():
    t = torch.tensor([1.0, 2.0])
    payload = {"t": t, "n": 3, "s": Seed(9), "l": [t, "name", None]}
    out = tree_map(lambda x: x + 1, payload, leaf=torch.Tensor)
    assert torch.equal(out["t"], torch.tensor([2.0, 3.0]))
    assert torch.equal(out["l"][0], torch.tensor([2.0, 3.0]))
    assert out["n"] == 3 and out["s"] is payload["s"] and out["l"][1:] == ["name", None]
    assert tree_leaves(payload, leaf=torch.Tensor) == [t, t]
    assert tree_leaves(payload, leaf=(torch.Tensor, Seed)) == [t, Seed(9), t]


def test_a_leaf_type_is_checked_before_the_containers():
    # a tuple subclass as the leaf type: fn sees it whole, not its items
    out = tree_map(lambda p: p.left + p.right, [Pair(1, 2), (3, 4)], leaf=Pair)
    assert out == [3, (3, 4)]
    assert tree_leaves([Pair(1, 2), (3, 4)], leaf=Pair) == [Pair(1, 2)]


def test_is_leaf_stops_the_walk_where_it_says():
    tagged = {"__t__": [1, 2]}
    tree = {"x": tagged, "y": {"z": [3]}}

    def is_tagged(x):
        return isinstance(x, dict) and "__t__" in x

    assert tree_leaves(tree, is_leaf=is_tagged) == [tagged, 3]
    assert tree_map(lambda x: "T" if is_tagged(x) else x, tree, is_leaf=is_tagged) == \
        {"x": "T", "y": {"z": [3]}}


def test_trees_beside_are_matched_by_key_and_index_and_none_where_they_part():
    pairs = []
    tree_map(lambda a, b: pairs.append((a, b)),
             {"k": [1, 2], "m": [3], "n": 4, "o": (5,)},
             {"k": [10, 20], "m": [30, 31], "o": 50})
    # "m" has another length and "o" another kind beside it, "n" is missing: None
    assert pairs == [(1, 10), (2, 20), (3, None), (4, None), (5, None)]
    out = tree_map(lambda a, b, c: (a, b, c), [1, {"x": 2}], [7, {"x": 8}], None)
    assert out == [(1, 7, None), {"x": (2, 8, None)}]


def test_dataclass_nodes_beside_are_matched_by_type():
    got = tree_map(lambda a, b: (a, b), Box(1, 2), Box(3, 4), nodes=(Box,))
    assert got == Box((1, 3), (2, 4))
    got = tree_map(lambda a, b: (a, b), Box(1, 2), (3, 4), nodes=(Box,))
    assert got == Box((1, None), (2, None))


def test_payload_nodes_walk_a_declared_payload_and_keep_its_stated_size():
    t = torch.ones(4)
    payload = [Declared({"v": t, "i": np.arange(2)}, nbytes=12), Scalar(0.5)]
    assert tree_leaves(payload) == [payload[0], Scalar(0.5)]  # no nodes: a leaf
    leaves = tree_leaves(payload, nodes=PAYLOAD_NODES)
    # the Declared's fields in order (payload, then its stated size); Scalar is no node
    assert len(leaves) == 4 and leaves[0] is t and np.array_equal(leaves[1], [0, 1])
    assert leaves[2:] == [12, Scalar(0.5)]
    out = tree_map(lambda x: x * 3, payload, leaf=torch.Tensor, nodes=PAYLOAD_NODES)
    assert type(out) is list and type(out[0]) is Declared and out[0].nbytes == 12
    assert torch.equal(out[0].payload["v"], torch.full((4,), 3.0))
    assert out[0].payload["i"] is payload[0].payload["i"] and out[1] is payload[1]


def test_other_containers_are_leaves():
    d = deque([1, 2])
    s = {1, 2}
    assert tree_leaves([d, s]) == [d, s]
    assert tree_map(lambda x: x, [d])[0] is d


@pytest.mark.parametrize("fn", [tree_leaves, lambda t: tree_map(lambda x: x, t)])
def test_a_tensor_is_a_leaf_not_a_sequence(fn):
    t = torch.arange(3)
    out = fn([t])
    assert out[0] is t
