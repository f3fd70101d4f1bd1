"""What several test modules share: graph builders, reference runners and checks. A test module
imports from here, never from another test module (tests/test_import_graph.py holds that)."""
