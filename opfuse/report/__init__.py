"""Show what the other stages computed: terminal tables now; JSON, HTML and the explorer later."""
