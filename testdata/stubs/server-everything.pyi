from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class GetStructuredContentResult(TypedDict):
    temperature: float  # Temperature in celsius
    conditions: str  # Weather conditions description
    humidity: float  # Humidity percentage

class everything:
    @staticmethod
    def echo(message: str) -> Any:
        """Echoes back the input string

        Args:
            message: Message to echo
        """

    @staticmethod
    def get_annotated_message(messageType: Literal["error", "success", "debug"], includeImage: bool = False) -> Any:
        """Demonstrates how annotations can be used to provide metadata about content.

        Args:
            messageType: Type of message to demonstrate different annotation patterns
            includeImage: Whether to include an example image
        """

    @staticmethod
    def get_env() -> Any:
        """Returns all environment variables, helpful for debugging MCP server configuration"""

    @staticmethod
    def get_resource_links(count: float = 3) -> Any:
        """Returns up to ten resource links that reference different types of resources

        Args:
            count: Number of resource links to return (1-10)
        """

    @staticmethod
    def get_resource_reference(resourceType: Literal["Text", "Blob"] = "Text", resourceId: float = 1) -> Any:
        """Returns a resource reference that can be used by MCP clients

        Args:
            resourceId: ID of the text resource to fetch
        """

    @staticmethod
    def get_structured_content(location: Literal["New York", "Chicago", "Los Angeles"]) -> GetStructuredContentResult:
        """Returns structured content along with an output schema for client data validation

        Args:
            location: Choose city
        """

    @staticmethod
    def get_sum(a: float, b: float) -> Any:
        """Returns the sum of two numbers

        Args:
            a: First number
            b: Second number
        """

    @staticmethod
    def get_tiny_image() -> Any:
        """Returns a tiny MCP logo image."""

    @staticmethod
    def gzip_file_as_resource(name: str = "README.md.gz", data: str = "https://raw.githubusercontent.com/modelcontextprotocol/servers/refs/heads/main/README.md", outputType: Literal["resourceLink", "resource"] = "resourceLink") -> Any:
        """Compresses a single file using gzip compression. Depending upon the selected output type, returns either the compressed data as a gzipped resource or a resource link, allowing it to be downloaded in a subsequent request during the current session.

        Args:
            name: Name of the output file
            data: URL or data URI of the file content to compress
            outputType: How the resulting gzipped file should be returned. 'resourceLink' returns a link to a resource that can be read later, 'resource' returns a full resource object.
        """

    @staticmethod
    def simulate_research_query(topic: str, ambiguous: bool = False) -> Any:
        """Simulates a deep research operation that gathers, analyzes, and synthesizes information. Demonstrates MCP task-based operations with progress through multiple stages. If 'ambiguous' is true and client supports elicitation, sends an elicitation request for clarification.

        Args:
            topic: The research topic to investigate
            ambiguous: Simulate an ambiguous query that requires clarification (triggers input_required status)
        """

    @staticmethod
    def toggle_simulated_logging() -> Any:
        """Toggles simulated, random-leveled logging on or off."""

    @staticmethod
    def toggle_subscriber_updates() -> Any:
        """Toggles simulated resource subscription updates on or off."""

    @staticmethod
    def trigger_long_running_operation(duration: float = 10, steps: float = 5) -> Any:
        """Demonstrates a long running operation with progress updates.

        Args:
            duration: Duration of the operation in seconds
            steps: Number of steps in the operation
        """
