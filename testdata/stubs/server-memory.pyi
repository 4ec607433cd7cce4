from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class Observation(TypedDict):
    entityName: str  # The name of the entity to add the observations to
    contents: list[str]  # An array of observation contents to add

class Result(TypedDict):
    entityName: str
    addedObservations: list[str]

class AddObservationsResult(TypedDict):
    results: list[Result]

class Entity(TypedDict):
    name: str  # The name of the entity
    entityType: str  # The type of the entity
    observations: list[str]  # An array of observation contents associated with the entity

class CreateEntitiesResult(TypedDict):
    entities: list[Entity]

Relation = TypedDict("Relation", {
    "from": str,  # The name of the entity where the relation starts
    "to": str,  # The name of the entity where the relation ends
    "relationType": str,  # The type of the relation
})

class CreateRelationsResult(TypedDict):
    relations: list[Relation]

class DeleteEntitiesResult(TypedDict):
    success: bool
    message: str

class Deletion(TypedDict):
    entityName: str  # The name of the entity containing the observations
    observations: list[str]  # An array of observations to delete

class DeleteObservationsResult(TypedDict):
    success: bool
    message: str

class DeleteRelationsResult(TypedDict):
    success: bool
    message: str

class OpenNodesResult(TypedDict):
    entities: list[Entity]
    relations: list[Relation]

class ReadGraphResult(TypedDict):
    entities: list[Entity]
    relations: list[Relation]

class SearchNodesResult(TypedDict):
    entities: list[Entity]
    relations: list[Relation]

class memory:
    @staticmethod
    def add_observations(observations: list[Observation]) -> AddObservationsResult:
        """Add new observations to existing entities in the knowledge graph"""

    @staticmethod
    def create_entities(entities: list[Entity]) -> CreateEntitiesResult:
        """Create multiple new entities in the knowledge graph"""

    @staticmethod
    def create_relations(relations: list[Relation]) -> CreateRelationsResult:
        """Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"""

    @staticmethod
    def delete_entities(entityNames: list[str]) -> DeleteEntitiesResult:
        """Delete multiple entities and their associated relations from the knowledge graph

        Args:
            entityNames: An array of entity names to delete
        """

    @staticmethod
    def delete_observations(deletions: list[Deletion]) -> DeleteObservationsResult:
        """Delete specific observations from entities in the knowledge graph"""

    @staticmethod
    def delete_relations(relations: list[Relation]) -> DeleteRelationsResult:
        """Delete multiple relations from the knowledge graph

        Args:
            relations: An array of relations to delete
        """

    @staticmethod
    def open_nodes(names: list[str]) -> OpenNodesResult:
        """Open specific nodes in the knowledge graph by their names

        Args:
            names: An array of entity names to retrieve
        """

    @staticmethod
    def read_graph() -> ReadGraphResult:
        """Read the entire knowledge graph"""

    @staticmethod
    def search_nodes(query: str) -> SearchNodesResult:
        """Search for nodes in the knowledge graph based on a query

        Args:
            query: The search query to match against entity names, types, and observation content
        """
