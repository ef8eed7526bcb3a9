"""A corpus embedded by the engines data teams already run: `spark.with_elmo` (a Spark DataFrame) and
`ray.with_elmo` (a Ray Data Dataset), both running `embed.arrow.ArrowEmbedder` on their workers. pyspark and
ray are imported only by these modules' functions (the `[spark]` and `[ray]` extras)."""
