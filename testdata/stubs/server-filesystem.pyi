from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class CreateDirectoryResult(TypedDict):
    content: str

class DirectoryTreeResult(TypedDict):
    content: str

class Edit(TypedDict):
    oldText: str  # Text to search for - must match exactly
    newText: str  # Text to replace with

class EditFileResult(TypedDict):
    content: str

class GetFileInfoResult(TypedDict):
    content: str

class ListAllowedDirectoriesResult(TypedDict):
    content: str

class ListDirectoryResult(TypedDict):
    content: str

class ListDirectoryWithSizesResult(TypedDict):
    content: str

class MoveFileResult(TypedDict):
    content: str

class ReadFileResult(TypedDict):
    content: str

class ContentItem(TypedDict):
    type: Literal["image", "audio"]
    data: str
    mimeType: str

class ReadMediaFileContentItem(TypedDict):
    type: Literal["resource"]
    resource: dict[str, Any]

class ReadMediaFileResult(TypedDict):
    content: list[ContentItem | ReadMediaFileContentItem]

class ReadMultipleFilesResult(TypedDict):
    content: str

class ReadTextFileResult(TypedDict):
    content: str

class SearchFilesResult(TypedDict):
    content: str

class WriteFileResult(TypedDict):
    content: str

class filesystem:
    @staticmethod
    def create_directory(path: str) -> CreateDirectoryResult:
        """Create a new directory or ensure a directory exists. Can create multiple nested directories in one operation. If the directory already exists, this operation will succeed silently. Perfect for setting up directory structures for projects or ensuring required paths exist. Only works within allowed directories."""

    @staticmethod
    def directory_tree(path: str, excludePatterns: list[str] = []) -> DirectoryTreeResult:
        """Get a recursive tree view of files and directories as a JSON structure. Each entry includes 'name', 'type' (file/directory), and 'children' for directories. Files have no children array, while directories always have a children array (which may be empty). The output is formatted with 2-space indentation for readability. Only works within allowed directories."""

    @staticmethod
    def edit_file(path: str, edits: list[Edit], dryRun: bool = False) -> EditFileResult:
        """Make line-based edits to a text file. Each edit replaces exact line sequences with new content. Returns a git-style diff showing the changes made. Only works within allowed directories.

        Args:
            dryRun: Preview changes using git-style diff format
        """

    @staticmethod
    def get_file_info(path: str) -> GetFileInfoResult:
        """Retrieve detailed metadata about a file or directory. Returns comprehensive information including size, creation time, last modified time, permissions, and type. This tool is perfect for understanding file characteristics without reading the actual content. Only works within allowed directories."""

    @staticmethod
    def list_allowed_directories() -> ListAllowedDirectoriesResult:
        """Returns the list of directories that this server is allowed to access. Subdirectories within these allowed directories are also accessible. Use this to understand which directories and their nested paths are available before trying to access files."""

    @staticmethod
    def list_directory(path: str) -> ListDirectoryResult:
        """Get a detailed listing of all files and directories in a specified path. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is essential for understanding directory structure and finding specific files within a directory. Only works within allowed directories."""

    @staticmethod
    def list_directory_with_sizes(path: str, sortBy: Literal["name", "size"] = "name") -> ListDirectoryWithSizesResult:
        """Get a detailed listing of all files and directories in a specified path, including sizes. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is useful for understanding directory structure and finding specific files within a directory. Only works within allowed directories.

        Args:
            sortBy: Sort entries by name or size
        """

    @staticmethod
    def move_file(source: str, destination: str) -> MoveFileResult:
        """Move or rename files and directories. Can move files between directories and rename them in a single operation. If the destination exists, the operation will fail. Works across different directories and can be used for simple renaming within the same directory. Both source and destination must be within allowed directories."""

    @staticmethod
    def read_file(path: str, tail: float | None = None, head: float | None = None) -> ReadFileResult:
        """Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.

        Args:
            tail: If provided, returns only the last N lines of the file
            head: If provided, returns only the first N lines of the file
        """

    @staticmethod
    def read_media_file(path: str) -> ReadMediaFileResult:
        """Read a file and return it as a base64-encoded content block with its MIME type. Image and audio files are returned as image/audio content; any other file type is returned as an embedded resource. Only works within allowed directories."""

    @staticmethod
    def read_multiple_files(paths: list[str]) -> ReadMultipleFilesResult:
        """Read the contents of multiple files simultaneously. This is more efficient than reading files one by one when you need to analyze or compare multiple files. Each file's content is returned with its path as a reference. Failed reads for individual files won't stop the entire operation. Only works within allowed directories.

        Args:
            paths: Array of file paths to read. Each path must be a string pointing to a valid file within allowed directories.
        """

    @staticmethod
    def read_text_file(path: str, tail: float | None = None, head: float | None = None) -> ReadTextFileResult:
        """Read the complete contents of a file from the file system as text. Handles various text encodings and provides detailed error messages if the file cannot be read. Use this tool when you need to examine the contents of a single file. Use the 'head' parameter to read only the first N lines of a file, or the 'tail' parameter to read only the last N lines of a file. Operates on the file as text regardless of extension. Only works within allowed directories.

        Args:
            tail: If provided, returns only the last N lines of the file
            head: If provided, returns only the first N lines of the file
        """

    @staticmethod
    def search_files(path: str, pattern: str, excludePatterns: list[str] = []) -> SearchFilesResult:
        """Recursively search for files and directories matching a pattern. The patterns should be glob-style patterns that match paths relative to the working directory. Use pattern like '*.ext' to match files in current directory, and '**/*.ext' to match files in all subdirectories. Returns full paths to all matching items. Great for finding files when you don't know their exact location. Only searches within allowed directories."""

    @staticmethod
    def write_file(path: str, content: str) -> WriteFileResult:
        """Create a new file or completely overwrite an existing file with new content. Use with caution as it will overwrite existing files without warning. Handles text content with proper encoding. Only works within allowed directories."""
