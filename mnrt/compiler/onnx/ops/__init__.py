"""The op converters, one module per op family, and the registry: one line per ONNX op.

Adding an op is a function in its family's module (or a new module) and one line here.
"""

from __future__ import annotations

from .. import names
from ..registry import register
from . import (
    attention,
    binary,
    constant,
    control,
    conv,
    flex_attention,
    index,
    linalg,
    linear_attention,
    loss,
    ml,
    norm,
    optional,
    ort_transformer,
    pool,
    qlinear,
    quantize,
    recurrent,
    reduce,
    resize,
    sample,
    sequence,
    shape,
    spectral,
    text,
    training,
    transformer,
    trees,
    unary,
)

# Ops that are one device kernel (names.py holds the table the exporter shares).
for _kernel, _op in names.UNARY.items():
    register(_op, unary.unary(_kernel))
for _kernel, _op in names.BINARY.items():
    register(_op, binary.binary(_kernel, cast_b=_op == "Pow"))
for _kernel, _op in names.REDUCE.items():
    register(_op, reduce.reduce(_kernel))

# unary: activations and casts
register("Gelu", unary.gelu)
register("Identity", unary.identity)
register("Dropout", unary.dropout)
register("LeakyRelu", unary.leaky_relu)
register("PRelu", unary.prelu)
register("Elu", unary.activation("elu", "alpha"))
register("Selu", unary.activation("selu", "alpha", "gamma"))
register("HardSigmoid", unary.activation("hard_sigmoid", "alpha", "beta"))
register("Clip", unary.clip)
register("Cast", unary.cast)
register("IsInf", unary.is_inf)
register("Celu", unary.activation("celu", "alpha"))
register("ThresholdedRelu", unary.activation("thresholded_relu", "alpha"))
register("Shrink", unary.shrink)
register("Mish", unary.activation("mish"))
register("HardSwish", unary.activation("hard_swish"))
register("Swish", unary.swish)
register("Not", unary.not_)
register("CastLike", unary.cast_like)
register("BitCast", unary.bit_cast)
# binary and variadic
register("Max", binary.variadic("maximum"))
register("Min", binary.variadic("minimum"))
register("Sum", binary.variadic("add"))
register("Mean", binary.variadic("add", mean=True))
register("Where", binary.where)
register("Mod", binary.mod)
register("BitShift", binary.bit_shift)
# reductions
register("ReduceL1", reduce.reduce("l1"))
register("ReduceL2", reduce.reduce("l2"))
register("ReduceSumSquare", reduce.reduce("sum_square"))
register("ReduceLogSum", reduce.reduce("log_sum"))
register("ReduceLogSumExp", reduce.reduce("logsumexp"))
register("Softmax", reduce.softmax("softmax"))
register("LogSoftmax", reduce.softmax("log_softmax"))
register("Hardmax", reduce.hardmax)
# linear algebra, convolution, pooling
register("MatMul", linalg.matmul)
register("Gemm", linalg.gemm)
register("Einsum", linalg.einsum)
register("Det", linalg.det)
register("Conv", conv.conv)
register("ConvTranspose", conv.conv_transpose)
register("DeformConv", conv.deform_conv)
register("MaxPool", pool.pool("max_pool2d"))
register("AveragePool", pool.pool("avg_pool2d"))
register("GlobalAveragePool", pool.global_pool)
register("GlobalMaxPool", pool.global_pool)
register("GlobalLpPool", pool.global_lp_pool)
register("LpPool", pool.lp_pool)
register("MaxUnpool", pool.max_unpool)
# normalisation
register("BatchNormalization", norm.batch_norm)
register("InstanceNormalization", norm.instance_norm)
register("LayerNormalization", norm.layer_norm)
register("LRN", norm.lrn)
register("LpNormalization", norm.lp_normalization)
register("MeanVarianceNormalization", norm.mean_variance_normalization)
register("GroupNormalization", norm.group_norm)
# shapes and indices
register("Reshape", shape.reshape)
register("Flatten", shape.flatten)
register("Squeeze", shape.squeeze)
register("Unsqueeze", shape.unsqueeze)
register("Transpose", shape.transpose)
register("Concat", shape.concat)
register("Slice", shape.slice_)
register("Gather", shape.gather)
register("Expand", shape.expand)
register("Tile", shape.tile)
register("Split", shape.split)
register("Pad", shape.pad)
register("Trilu", shape.trilu)
register("EyeLike", shape.eye_like)
register("DepthToSpace", shape.depth_to_space)
register("SpaceToDepth", shape.space_to_depth)
register("Resize", resize.resize)
register("Upsample", resize.resize)
register("GridSample", sample.grid_sample)
register("AffineGrid", sample.affine_grid)
register("RoiAlign", sample.roi_align)
# spectral: a transform along one axis is a constant matrix
register("DFT", spectral.dft)
register("STFT", spectral.stft)
# text features over token ids
register("TfIdfVectorizer", text.tfidf_vectorizer)
# positions: arg, top-k, gather and scatter, one-hot, running sums
register("ArgMax", index.arg("argmax"))
register("ArgMin", index.arg("argmin"))
register("TopK", index.top_k)
register("GatherElements", index.gather_elements)
register("GatherND", index.gather_nd)
register("ScatterElements", index.scatter_elements)
register("Scatter", index.scatter_elements)
register("ScatterND", index.scatter_nd)
register("TensorScatter", index.tensor_scatter)
register("Col2Im", index.col2im)
register("OneHot", index.one_hot)
register("CumSum", index.cumulative("cumsum"))
register("CumProd", index.cumulative("cumprod"))
register("ReverseSequence", index.reverse_sequence)
register("Compress", index.compress)
register("NonZero", index.data_dependent)
register("Unique", index.data_dependent)
register("MelWeightMatrix", index.data_dependent)
register("NonMaxSuppression", index.data_dependent)
# sequences and optionals, resolved at import time
register("SequenceEmpty", sequence.sequence_empty)
register("SequenceConstruct", sequence.sequence_construct)
register("SequenceInsert", sequence.sequence_insert)
register("SequenceErase", sequence.sequence_erase)
register("SequenceAt", sequence.sequence_at)
register("SequenceLength", sequence.sequence_length)
register("ConcatFromSequence", sequence.concat_from_sequence)
register("SplitToSequence", sequence.split_to_sequence)
register("SequenceMap", sequence.sequence_map)
register("Optional", optional.optional)
register("OptionalHasElement", optional.optional_has_element)
register("OptionalGetElement", optional.optional_get_element)
# known at import time
register("Constant", constant.constant)
register("Shape", constant.shape)
register("Size", constant.size)
register("ConstantOfShape", constant.constant_of_shape)
register("Range", constant.range_)
# losses
register("NegativeLogLikelihoodLoss", loss.nll_loss)
register("SoftmaxCrossEntropyLoss", loss.softmax_cross_entropy_loss)
# recurrent layers, unrolled over the sequence
register("LSTM", recurrent.lstm)
register("GRU", recurrent.gru)
register("RNN", recurrent.rnn)
# quantized: QDQ (Quantize/DequantizeLinear) and QOperator (integer products) formats
register("QuantizeLinear", quantize.quantize_linear)
register("DequantizeLinear", quantize.dequantize_linear)
register("DynamicQuantizeLinear", quantize.dynamic_quantize_linear)
register("MatMulInteger", quantize.matmul_integer)
register("QLinearMatMul", quantize.qlinear_matmul)
register("ConvInteger", quantize.conv_integer)
register("QLinearConv", quantize.qlinear_conv)
# ai.onnx.preview.training's optimizer steps
register("Adagrad", training.adagrad, domain="ai.onnx.preview.training")
register("Momentum", training.momentum, domain="ai.onnx.preview.training")
register("Adam", training.adam, domain="ai.onnx.preview.training")
# onnxruntime's own quantized ops, which its quantization tool writes in the QOperator format
register("QLinearAdd", qlinear.qlinear_add, domain="com.microsoft")
register("QLinearMul", qlinear.qlinear_mul, domain="com.microsoft")
register("QLinearSigmoid", qlinear.qlinear_sigmoid, domain="com.microsoft")
register("QLinearLeakyRelu", qlinear.qlinear_leaky_relu, domain="com.microsoft")
register("QLinearSoftmax", qlinear.qlinear_softmax, domain="com.microsoft")
register("QLinearGlobalAveragePool", qlinear.qlinear_global_average_pool, domain="com.microsoft")
register("QLinearAveragePool", qlinear.qlinear_average_pool, domain="com.microsoft")
register("QLinearConcat", qlinear.qlinear_concat, domain="com.microsoft")
register("QLinearWhere", qlinear.qlinear_where, domain="com.microsoft")
register("QGemm", qlinear.qgemm, domain="com.microsoft")


# transformer blocks (opset 23 on)
register("Attention", attention.attention)
register("LinearAttention", linear_attention.linear_attention)
register("FlexAttention", flex_attention.flex_attention, domain="ai.onnx.preview")
register("RMSNormalization", transformer.rms_norm)
register("RotaryEmbedding", transformer.rotary_embedding)
register("SwiGLU", transformer.swiglu)
# onnxruntime's fused transformer ops, which its transformer optimizer writes
register("Gelu", ort_transformer.gelu, domain="com.microsoft")
register("BiasGelu", ort_transformer.bias_gelu, domain="com.microsoft")
register("FastGelu", ort_transformer.fast_gelu, domain="com.microsoft")
register("QuickGelu", ort_transformer.quick_gelu, domain="com.microsoft")
register("SkipLayerNormalization", ort_transformer.skip_layer_norm, domain="com.microsoft")
register("SkipSimplifiedLayerNormalization", ort_transformer.skip_simplified_layer_norm,
         domain="com.microsoft")  # fmt: skip
register("SimplifiedLayerNormalization", ort_transformer.simplified_layer_norm)
register("MatMulNBits", ort_transformer.matmul_nbits, domain="com.microsoft")
# classic machine learning (ai.onnx.ml, as sklearn-onnx writes a pipeline)
register("Binarizer", ml.binarizer, domain="ai.onnx.ml")
register("ArrayFeatureExtractor", ml.array_feature_extractor, domain="ai.onnx.ml")
register("Scaler", ml.scaler, domain="ai.onnx.ml")
register("Normalizer", ml.normalizer, domain="ai.onnx.ml")
register("Imputer", ml.imputer, domain="ai.onnx.ml")
register("FeatureVectorizer", ml.feature_vectorizer, domain="ai.onnx.ml")
register("OneHotEncoder", ml.one_hot_encoder, domain="ai.onnx.ml")
register("LinearRegressor", ml.linear_regressor, domain="ai.onnx.ml")
register("LinearClassifier", ml.linear_classifier, domain="ai.onnx.ml")
register("SVMRegressor", ml.svm_regressor, domain="ai.onnx.ml")
register("TreeEnsemble", trees.tree_ensemble, domain="ai.onnx.ml")
register("TreeEnsembleRegressor", trees.tree_ensemble_regressor, domain="ai.onnx.ml")
register("TreeEnsembleClassifier", trees.tree_ensemble_classifier, domain="ai.onnx.ml")
# control flow decided at import time
register("If", control.if_)
register("Scan", control.scan)
register("Loop", control.loop)
