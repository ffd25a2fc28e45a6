"""The paper's claims (Ba, Kiros, Hinton 2016), measured on a backend: the layer
model of §5.1, batch/weight/layer normalization, Table 1's invariances, §5.2's
gradient geometry, and §3.1's recurrent networks with their error propagation.

Imports the top level and check/, never perf/ (docs/architecture.md).
"""
