"""Forward chaining: fact types, the rule language's semantics, the default engine, the optional
durable engine and the engine registry."""
