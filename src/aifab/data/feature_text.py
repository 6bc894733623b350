"""TF-IDF text features: fitted with sklearn, applied inside DuckDB as a vectorized Python UDF.

The fitted vocabulary and idf weights are stored in the artifact; the same UDF computes the
vectors when the features dataset is built and when new rows are transformed, so both agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.data.feature_spec import TfIdf


def fit_tfidf(texts: Sequence[str | None], feature: TfIdf, where: str) -> dict[str, Any]:
    """Fit a TfidfVectorizer on the training texts; return its vocabulary and idf weights.

    Args:
        texts: the training rows' texts (NULL counts as an empty document).
        feature: the tfidf feature spec.
        where: how to name the feature in errors.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(
        max_features=feature.max_features,
        ngram_range=(1, feature.ngram_max),
        min_df=feature.min_df,
        lowercase=feature.lowercase,
        sublinear_tf=feature.sublinear_tf,
        dtype=np.float64,
    )
    try:
        vec.fit([t or "" for t in texts])
    except ValueError as exc:  # e.g. "empty vocabulary; perhaps the documents only contain..."
        raise InvalidInputError(f"{where}: cannot fit TF-IDF: {exc}") from None
    vocabulary = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
    return {"vocabulary": vocabulary, "idf": [float(x) for x in vec.idf_]}


def tfidf_function(feature: TfIdf, params: dict[str, Any]) -> Callable[[Any], pa.Array]:
    """An Arrow-in, Arrow-out function: texts -> l2-normalised TF-IDF vectors (LIST<DOUBLE>)."""
    from sklearn.feature_extraction.text import CountVectorizer

    counter = CountVectorizer(
        vocabulary=params["vocabulary"],
        ngram_range=(1, feature.ngram_max),
        lowercase=feature.lowercase,
    )
    idf = np.asarray(params["idf"], dtype=np.float64)
    width = len(idf)
    # The vectorizer's own analyzer and vocabulary, counted straight into a dense matrix: the
    # counts CountVectorizer.transform makes, without its sparse matrix (a one-row call costs
    # a fraction of it).
    analyze = counter.build_analyzer()
    index = {term: j for j, term in enumerate(params["vocabulary"])}

    def apply(texts: Any) -> pa.Array:
        docs = [t or "" for t in texts.to_pylist()]
        x = np.zeros((len(docs), width), dtype=np.float64)
        for row, doc in enumerate(docs):
            for term in analyze(doc):
                j = index.get(term)
                if j is not None:
                    x[row, j] += 1.0
        if feature.sublinear_tf:  # the same 1 + ln(tf) as sklearn's TfidfTransformer
            np.log(x, out=x, where=x > 0)
            x[x > 0] += 1.0
        x *= idf
        norms = np.sqrt(np.einsum("ij,ij->i", x, x))
        x /= np.where(norms > 0, norms, 1.0)[:, None]
        offsets = np.arange(0, len(docs) * width + 1, width, dtype=np.int64)
        return pa.LargeListArray.from_arrays(offsets, pa.array(x.ravel())).cast(
            pa.list_(pa.float64())
        )

    return apply


def register_tfidf(
    con: duckdb.DuckDBPyConnection, name: str, feature: TfIdf, params: dict[str, Any]
) -> None:
    """Register the TF-IDF UDF ``name(VARCHAR) -> DOUBLE[]`` on ``con``."""
    from duckdb.func import FunctionNullHandling, PythonUDFType

    con.create_function(
        name,
        tfidf_function(feature, params),
        ["VARCHAR"],
        "DOUBLE[]",
        type=PythonUDFType.ARROW,
        null_handling=FunctionNullHandling.SPECIAL,
        side_effects=False,
    )
