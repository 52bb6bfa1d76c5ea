"""Images in: every layout that knows its images says, per group, where each one is.

Datasets are written by the real `datasets` library, shards by the real `webdataset`
library, benchmark folders laid out as published, with generated pictures; the bytes
read back are compared with the bytes written.
"""

from __future__ import annotations

import json

import pytest

from _clip_fixtures import jpeg_bytes, random_images
from capgeo.captions import load_captions
from capgeo.errors import DataError
from capgeo.images.read import image_bytes, read_one
from capgeo.images.sources import BytesRef, ColumnRef, FileRef, MemberRef, locate


def png_bytes(image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def read_back(captions, images_root=None) -> list:
    located = locate(captions, images_root)
    assert located is not None
    got = {code: data for code, data, _ in image_bytes(list(enumerate(located.refs)))}
    return [got.get(code) for code in range(captions.n_groups)]


@pytest.fixture(scope="module")
def pictures():
    return [jpeg_bytes(image) for image in random_images(6, seed=3)]


def hf_dataset(pictures, paths=None):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    rows = {"image": [{"bytes": data, "path": paths[i] if paths else None} for i, data in enumerate(pictures)
                      for _ in range(2)],
            "caption": [f"caption {k} of image {i}" for i in range(len(pictures)) for k in range(2)]}
    return datasets.Dataset.from_dict(rows, features=features)


def test_image_column_of_parquet_save_to_disk_and_memory_reads_the_bytes_written(tmp_path, pictures):
    dataset = hf_dataset(pictures)
    dataset.to_parquet(str(tmp_path / "data.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    for source, kind in ((tmp_path / "data.parquet", ColumnRef), (tmp_path / "saved", ColumnRef), (dataset, BytesRef)):
        captions = load_captions(source)
        assert captions.n_groups == len(pictures)  # two captions per image: one group each
        refs = locate(captions).refs
        assert all(isinstance(ref, kind) for ref in refs), source
        assert read_back(captions) == pictures, source
        # one image on its own, as a thumbnail reads it
        assert read_one(refs[4]) == pictures[4]
        # thumbnails of several, each shard read once
        import io

        from PIL import Image

        from capgeo.images.vectors import Thumbnails

        made = Thumbnails(refs).many([5, 1, 1])
        assert set(made) == {5, 1} and Image.open(io.BytesIO(made[5])).format == "JPEG"


def test_parquet_shards_with_image_paths_and_bytes(tmp_path, pictures):
    """An Image column whose rows hold both a path and the bytes: the path names the group, the
    bytes (in the shard) are the image, even where no file of that name exists."""
    dataset = hf_dataset(pictures, paths=[f"img_{i}.jpg" for i in range(len(pictures))])
    (tmp_path / "data").mkdir()
    dataset.select(range(6)).to_parquet(str(tmp_path / "data" / "train-00000-of-00002.parquet"))
    dataset.select(range(6, 12)).to_parquet(str(tmp_path / "data" / "train-00001-of-00002.parquet"))
    captions = load_captions(tmp_path / "data")
    assert captions.group_names[:2] == ["img_0.jpg", "img_1.jpg"]
    refs = locate(captions).refs
    assert {ref.file.name for ref in refs} == {"train-00000-of-00002.parquet", "train-00001-of-00002.parquet"}
    assert read_back(captions) == pictures


def test_webdataset_jpg_and_png_members_plain_and_gzipped(tmp_path):
    webdataset = pytest.importorskip("webdataset")
    images = random_images(5, seed=5)
    written = {}
    for name in ("shard.tar", "shard.tar.gz"):
        with webdataset.TarWriter(str(tmp_path / name)) as writer:
            for index, image in enumerate(images):
                kind = "png" if index % 2 else "jpg"
                data = png_bytes(image) if kind == "png" else jpeg_bytes(image)
                written[index] = data
                writer.write({"__key__": f"{index:06d}", kind: data, "txt": f"caption {index}"})
        captions = load_captions(tmp_path / name)
        refs = locate(captions).refs
        assert all(isinstance(ref, MemberRef) for ref in refs)
        assert (refs[0].offset >= 0) == (name == "shard.tar")  # seeked to in a plain tar only
        assert read_back(captions) == [written[index] for index in range(5)], name


def test_webdataset_samples_with_several_captions_share_their_image(tmp_path):
    webdataset = pytest.importorskip("webdataset")
    images = random_images(3, seed=6)
    with webdataset.TarWriter(str(tmp_path / "s.tar")) as writer:
        for index, image in enumerate(images):
            writer.write({"__key__": f"k{index}", "webp": jpeg_bytes(image),
                          "json": json.dumps({"captions": [f"a {index}", f"b {index}"], "img": f"i{index}"})})
    captions = load_captions(tmp_path / "s.tar", captions_column="captions", group_column="img")
    assert captions.n_groups == 3
    assert read_back(captions) == [jpeg_bytes(image) for image in images]


def write_images(folder, names, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    data = [jpeg_bytes(image) for image in random_images(len(names), seed=seed)]
    for name, payload in zip(names, data):
        (folder / name).write_bytes(payload)
    return data


def test_coco_annotations_find_val2017_beside_them(tmp_path):
    names = [f"{i:012d}.jpg" for i in (139, 285, 632)]
    data = write_images(tmp_path / "coco" / "val2017", names)
    (tmp_path / "coco" / "annotations").mkdir()
    annotations = tmp_path / "coco" / "annotations" / "captions_val2017.json"
    annotations.write_text(json.dumps({
        "images": [{"id": int(name[:12]), "file_name": name} for name in names],
        "annotations": [{"id": k, "image_id": int(names[k % 3][:12]), "caption": f"caption {k}"} for k in range(9)]}))
    captions = load_captions(annotations)
    assert read_back(captions) == data


def test_coco_list_karpathy_and_flickr_layouts(tmp_path):
    names = ["COCO_val2014_000000391895.jpg", "COCO_val2014_000000060623.jpg"]
    data = write_images(tmp_path / "images" / "val2014", names)
    listing = tmp_path / "mscoco_test.json"
    listing.write_text(json.dumps([{"split": "test", "image_name": name, "file_path": f"val2014/{name}",
                                    "captions": ["a", "b"]} for name in names]))
    assert read_back(load_captions(listing)) == data
    flickr = tmp_path / "flickr"
    flickr_data = write_images(flickr / "flickr30k-images", ["1000092795.jpg", "10002456.jpg"], seed=1)
    karpathy = flickr / "dataset_flickr30k.json"
    karpathy.write_text(json.dumps({"images": [
        {"filename": name, "split": "test", "sentences": [{"raw": f"x {name}", "sentid": k}]}
        for k, name in enumerate(["1000092795.jpg", "10002456.jpg"])]}))
    assert read_back(load_captions(karpathy, format="karpathy")) == flickr_data


def test_docci_urban1k_and_dci_layouts(tmp_path):
    docci = tmp_path / "docci"
    data = write_images(docci / "images", ["test_00001.jpg", "test_00002.jpg"])
    lines = [{"example_id": f"test_0000{i}", "split": "test", "image_file": f"test_0000{i}.jpg",
              "description": f"a long description {i}"} for i in (1, 2)]
    (docci / "docci_descriptions.jsonlines").write_text("\n".join(json.dumps(line) for line in lines))
    assert read_back(load_captions(docci / "docci_descriptions.jsonlines")) == data

    urban = tmp_path / "Urban1k"
    (urban / "caption").mkdir(parents=True)
    for number in (1, 2, 10):
        (urban / "caption" / f"{number}.txt").write_text(f"an urban scene {number}")
    urban_data = write_images(urban / "image", ["1.jpg", "2.jpg", "10.jpg"], seed=2)
    assert read_back(load_captions(urban / "caption")) == urban_data

    dci = tmp_path / "dci"
    (dci / "complete").mkdir(parents=True)
    for stem in ("sa_1", "sa_2"):
        (dci / "complete" / f"{stem}.json").write_text(json.dumps({"extra_caption": f"dense {stem}",
                                                                    "image": f"{stem}.jpg"}))
    dci_data = write_images(dci / "photos", ["sa_1.jpg", "sa_2.jpg"], seed=3)
    assert read_back(load_captions(dci / "complete", format="dci")) == dci_data


def test_images_elsewhere_with_images_dir_and_image_path_column(tmp_path):
    data = write_images(tmp_path / "pictures" / "sub", ["a.png", "b.jpg", "c.jpg"])
    table = tmp_path / "captions" / "pairs.csv"
    table.parent.mkdir()
    table.write_text("text,path\nfirst,sub/a.png\nsecond,sub/b.jpg\nthird,sub/c.jpg\nfourth,sub/a.png\n")
    captions = load_captions(table, image_column="path", images=tmp_path / "pictures")
    assert captions.n_groups == 3  # the image path column is the group
    assert read_back(captions) == data
    # the same, with --images given to image_vectors rather than to the loader
    assert read_back(load_captions(table, image_column="path"), images_root=tmp_path / "pictures") == data


def test_images_missing_are_reported_by_name(tmp_path):
    data = write_images(tmp_path, ["a.jpg"])
    table = tmp_path / "pairs.jsonl"
    table.write_text("\n".join(json.dumps({"caption": f"c{i}", "image": name})
                               for i, name in enumerate(["a.jpg", "gone.jpg"])))
    captions = load_captions(table)
    located = locate(captions)
    assert located.missing == {1: "gone.jpg"}
    assert isinstance(located.refs[0], FileRef) and read_one(located.refs[0]) == data[0]


def test_a_dataset_naming_no_images_locates_none(tmp_path):
    table = tmp_path / "plain.txt"
    table.write_text("one caption\nanother caption\n")
    assert locate(load_captions(table)) is None
    assert load_captions(table).image_source is None


def test_images_dir_that_is_missing_is_one_error(tmp_path):
    table = tmp_path / "plain.txt"
    table.write_text("one caption\nanother caption\n")
    with pytest.raises(DataError, match="--images .*no such folder"):
        load_captions(table, images=tmp_path / "nowhere")


def test_caption_only_loading_reads_no_image(tmp_path, monkeypatch, pictures):
    """Loading records where the images are; nothing of them is read until asked for."""
    import capgeo.images.read as read

    dataset = hf_dataset(pictures)
    dataset.to_parquet(str(tmp_path / "data.parquet"))
    monkeypatch.setattr(read, "_column_rows", lambda *a, **k: pytest.fail("an image was read while loading"))
    captions = load_captions(tmp_path / "data.parquet")
    assert len(captions.texts) == 12 and captions.image_source is not None


def test_cli_options_reach_the_loader(tmp_path):
    import click

    from capgeo.cli.options import load_from_options, read_options

    data = write_images(tmp_path / "pics", ["x.jpg", "y.jpg"])
    table = tmp_path / "pairs.tsv"
    table.write_text("caption\tfile\nfirst\tx.jpg\nsecond\ty.jpg\n")
    seen = {}

    @click.command()
    @click.argument("data")
    @read_options
    def command(**options):
        seen["captions"] = load_from_options(options)

    command.main([str(table), "--image-column", "file", "--images", str(tmp_path / "pics")], standalone_mode=False)
    assert read_back(seen["captions"]) == data


def test_image_column_beside_another_group_column_and_image_paths_without_bytes(tmp_path):
    """--group-column names the image (image_id), --image-column where it is; an Image feature
    holding only paths names files beside the shard."""
    datasets = pytest.importorskip("datasets")
    data = write_images(tmp_path / "pics", ["p0.jpg", "p1.jpg"], seed=9)
    table = tmp_path / "pairs.jsonl"
    table.write_text("\n".join(json.dumps({"caption": f"c{k}", "image_id": 7 + k % 2, "file": f"pics/p{k % 2}.jpg"})
                               for k in range(4)))
    captions = load_captions(table, group_column="image_id", image_column="file")
    assert captions.group_names == ["7", "8"]
    assert read_back(captions) == data

    features = datasets.Features({"image": datasets.Image(decode=False), "caption": datasets.Value("string")})
    rows = {"image": [{"bytes": None, "path": str(tmp_path / "pics" / f"p{k}.jpg")} for k in (0, 1)],
            "caption": ["first", "second"]}
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "paths.parquet"))
    captions = load_captions(tmp_path / "paths.parquet")
    assert all(isinstance(ref, FileRef) for ref in locate(captions).refs)
    assert read_back(captions) == data
