"""Game-theory analysis of policies given as tables: exact exploitability (Kuhn by hand,
any OpenSpiel game through `pyspiel`), perfect-information best responses, quantal-response
and regularised equilibria, averages of iterates and of a pool's members, and move
distributions. Nothing here plays a game or loads a model: `spiral.evaluation` turns a
language model into such a table and runs the `spiral eval` command."""
