"""The wide-and-deep model: one logit per example, one shared id table."""

from components.model import features
from components.model.trainer import model as model_lib


def test_model_returns_one_logit_per_example(synthetic):
    model = model_lib.build_model()
    batch, _ = next(iter(synthetic.dataset()))
    assert model(batch).shape == (synthetic.batch_size,)


def test_id_table_layers_have_a_row_per_id_of_every_id_feature():
    model = model_lib.build_model(model_lib.ModelConfig(embedding_dim=5))
    rows = sum(f.cardinality for f in features.FEATURES)
    shapes = {name: model.get_layer(name).embeddings.shape.as_list() for name in model_lib.ID_TABLE_LAYERS}
    assert shapes == {model_lib.EMBEDDINGS_LAYER: [rows, 5], model_lib.WIDE_WEIGHTS_LAYER: [rows, 1]}


def test_each_id_feature_owns_a_range_of_the_table_up_to_its_missing_id():
    offsets = model_lib.table_offsets()
    id_features = [f for f in features.FEATURES if f.kind in features.ID_KINDS]
    assert list(offsets) == [f.name for f in id_features]
    for feature, following in zip(id_features, id_features[1:]):
        assert offsets[following.name] == offsets[feature.name] + feature.missing_id + 1
