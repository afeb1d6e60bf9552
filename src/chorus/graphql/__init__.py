"""The GraphQL contract of DESIGN §5: strawberry types, inputs, payloads and the schema."""
