"""The format of ``commitlogRegions.json`` (``broker.store.regions_file``), as plain data: the
structural defects each raise their sentence, every broken rule is one sentence of
``Regions.problems()`` in the module's order, and ``to_text``/``from_text`` are inverses."""
from __future__ import annotations

import json

import pytest

from broker.store.regions_file import (Region, Regions, RegionsError, RegionsVersionError, class_from, from_document,
                                       from_text)

MB = 1 << 20


def doc(**changes: object) -> dict[str, object]:
    d: dict[str, object] = {
        "version": 1, "writtenBy": "mqupgrade", "mappedFileSizeCommitLog": MB, "classicFrom": 6 * MB,
        "regions": [{"kind": "classic", "path": "commitlog", "start": 0, "end": 4 * MB},
                    {"kind": "dledger", "path": "dledger-n0", "start": 4 * MB, "end": 5 * MB + 7}]}
    d.update(changes)
    return d


def test_a_good_file_round_trips_and_breaks_no_rule() -> None:
    r = from_document(doc())
    assert r == Regions(MB, 6 * MB, (Region("classic", "commitlog", 0, 4 * MB),
                                     Region("dledger", "dledger-n0", 4 * MB, 5 * MB + 7)))
    assert r.problems() == [] and Regions.of(list(r.regions), MB) == r
    assert r.to_text() == json.dumps(doc(), indent=2) + "\n" and from_text(r.to_text()) == r
    assert r.resolved("/s").regions[1].path == "/s/dledger-n0"
    assert r.resolved("/s").regions[1].resolved("/t").path == "/s/dledger-n0"  # absolute stays
    assert (class_from(5 * MB + 7, MB), class_from(6 * MB, MB), class_from(0, MB)) == (6 * MB, 6 * MB, 0)


@pytest.mark.parametrize("document, sentence", [
    ("{x", "not valid JSON ({json})"),
    ("[1]", "not a JSON object"),
    (doc(extra=1), "unknown field 'extra' (the spec's: version, writtenBy, mappedFileSizeCommitLog, classicFrom, "
                   "regions)"),
    ({k: v for k, v in doc().items() if k != "writtenBy"}, "field 'writtenBy' is missing"),
    (doc(classicFrom="6291456"), "field 'classicFrom' is '6291456', not an integer"),
    (doc(classicFrom=True), "field 'classicFrom' is True, not an integer"),
    (doc(regions={}), "field 'regions' is {}, not a list"),
    (doc(regions=[5]), "regions[0] is 5, not an object"),
    (doc(regions=[{"kind": "classic", "path": None, "start": 0, "end": 1}]),
     "field 'path' of regions[0] is None, not a string"),
    (doc(regions=[{"kind": "classic", "path": "c", "start": 0, "end": 1, "size": 1}]),
     "unknown field 'size' of regions[0] (the spec's: kind, path, start, end)"),
])
def test_structural_defects_each_raise_their_sentence(document: object, sentence: str) -> None:
    if "{json}" in sentence:  # the json module's own words for the syntax error
        with pytest.raises(ValueError) as syntax:
            json.loads(str(document))
        sentence = sentence.replace("{json}", str(syntax.value))
    with pytest.raises(RegionsError) as err:
        from_text(document if isinstance(document, str) else json.dumps(document))
    assert str(err.value) == sentence and not isinstance(err.value, RegionsVersionError)


def test_another_versions_shape_is_named_by_its_version_first() -> None:
    with pytest.raises(RegionsVersionError) as err:
        from_document(doc(version=2, regions="x"))
    assert str(err.value) == "unknown version 2 (known: 1), not readable as version 1: field 'regions' is 'x', not a list"
    with pytest.raises(RegionsVersionError) as err:
        from_document({k: v for k, v in doc(regions=None).items() if k != "version"})
    assert str(err.value) == "no version (known: 1), not readable as version 1: field 'version' is missing"
    assert from_document(doc(version=2)).problems() == ["unknown version 2 (known: 1)"]  # the shape fits: a rule


def test_every_broken_rule_is_one_sentence_in_order() -> None:
    r = from_document(doc(mappedFileSizeCommitLog=0, regions=[]))
    assert r.problems() == ["mappedFileSizeCommitLog is 0, not positive",
                            "regions is [], not a non-empty list (a migrated store keeps at least its DLedger region)"]
    r = from_document(doc(classicFrom=6 * MB + 1, regions=[
        {"kind": "classic", "path": "", "start": -4, "end": 4 * MB},
        {"kind": "dledger", "path": "d", "start": 4 * MB, "end": 4 * MB}]))
    assert r.problems() == [
        "regions[0] (classic) has an empty path",
        "regions[0] (classic) starts at -4, below 0",
        "regions[1] (dledger) [4194304, 4194304) is empty",
        "classicFrom 6291457 is not a multiple of mappedFileSizeCommitLog 1048576 (the writable commitlog's first file "
        "name; expected 4194304)",
    ]
    with pytest.raises(RegionsError) as err:
        r.check()
    assert str(err.value) == "regions[0] (classic) has an empty path"
    with pytest.raises(RegionsError) as err:
        Regions.of([Region("dledger", "d", 5, 5)], MB)
    assert str(err.value) == "regions[0] (dledger) [5, 5) is empty"
